"""deploy/Dockerfile without a Docker engine: its structure, and its build steps run here as a script.

The builder stage's one build step is ``deploy/build-wheels``; the slow test runs that script, then the
runtime stage's install step taken verbatim from the Dockerfile (paths moved into a temporary folder),
and uses the result: so a wheel missing from the set, a wrong pin or a broken entry point fails here.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
BUILD_WHEELS = ROOT / "deploy" / "build-wheels"


@dataclass
class Stage:
    base: str
    name: str
    steps: list[tuple[str, str]] = field(default_factory=list)  # (INSTRUCTION, arguments)

    def args(self, instruction: str) -> list[str]:
        return [rest for name, rest in self.steps if name == instruction]


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined and comments dropped."""
    logical, pending = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        logical.append(pending + stripped)
        pending = ""
    assert not pending, "a continuation line at the end of the Dockerfile"
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in logical]


def stages() -> list[Stage]:
    found: list[Stage] = []
    for name, rest in instructions(DOCKERFILE.read_text()):
        if name == "FROM":
            base, _as, alias = rest.split()
            assert _as.upper() == "AS", rest
            found.append(Stage(base, alias))
        elif found:
            found[-1].steps.append((name, rest))
        else:
            assert name == "ARG", f"{name} before the first FROM"
    return found


def test_two_stages_builder_then_runtime() -> None:
    builder, runtime = stages()
    assert (builder.name, runtime.name) == ("builder", "runtime")
    assert builder.base.startswith("rust:") and runtime.base.startswith("python:")
    assert "slim" in builder.base and "slim" in runtime.base


def test_runtime_runs_as_an_unprivileged_user_with_rhaipool_as_entry_point() -> None:
    runtime = stages()[-1]
    users = runtime.args("USER")
    assert users, "the runtime stage sets no USER: it would run as root"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) >= 1000, "a numeric non-root uid (runAsNonRoot can check it)"
    assert runtime.steps[-1][0] == "CMD" and runtime.args("ENTRYPOINT") == ['["rhaipool"]']
    assert '"serve"' in runtime.args("CMD")[0]


def test_runtime_has_no_compiler_and_no_wheel_layer() -> None:
    runtime = stages()[-1]
    runs = " ".join(runtime.args("RUN"))
    for tool in ("gcc", "cargo", "rustc", "build-essential", "python3-dev"):
        assert tool not in runs
    assert runtime.args("COPY") == [], "wheels come from a build-time mount, not a COPY layer"
    installs = [r for r in runtime.args("RUN") if "--find-links /wheels" in r]
    assert len(installs) == 1 and "--no-index" in installs[0]
    assert "--mount=type=bind,from=builder,source=/wheels,target=/wheels" in installs[0]


def test_every_copy_source_exists_and_covers_what_build_wheels_reads() -> None:
    builder = stages()[0]
    copied = []
    for rest in builder.args("COPY"):
        *sources, _target = shlex.split(rest)
        for source in sources:
            assert not source.startswith("--"), f"unexpected COPY flag in the builder: {rest}"
            assert (ROOT / source).exists(), f"COPY {source}: no such path in the repository"
            copied.append(source.rstrip("/"))
    cp_line = next(line for line in BUILD_WHEELS.read_text().splitlines() if line.startswith("cp -R "))
    read_by_script = shlex.split(cp_line)[2:-1]
    assert set(read_by_script) <= set(copied), "build-wheels copies a path the image does not COPY"
    for needed in ("rhai-python", "deploy/build-wheels", "deploy/constraints.txt"):
        assert needed in copied


def test_build_context_sends_exactly_what_the_builder_copies() -> None:
    """The allow-list in deploy/Dockerfile.dockerignore: everything is excluded but the COPY sources."""
    lines = [
        line.strip()
        for line in (ROOT / "deploy" / "Dockerfile.dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*"
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    copied = {source.rstrip("/") for rest in stages()[0].args("COPY") for source in shlex.split(rest)[:-1]}
    assert allowed == copied
    assert {"**/__pycache__", "rhai-python/target"} <= set(lines)


def test_builder_builds_with_the_same_commands_as_quickstart() -> None:
    builder = stages()[0]
    assert [r for r in builder.args("RUN") if "deploy/build-wheels" in r] == [
        "CARGO_TARGET_DIR=/tmp/target deploy/build-wheels /wheels python3"
    ]
    script = BUILD_WHEELS.read_text()
    quickstart = (ROOT / "deploy" / "quickstart").read_text()
    maturin_quick = re.search(r"maturin develop (.*)", quickstart)
    assert maturin_quick is not None
    quick_flags = {f for f in maturin_quick.group(1).split() if f.startswith("-") and f != "-q"}
    assert {"--release", "--locked", "-m"} <= quick_flags
    assert "-m rhai-python/Cargo.toml" in maturin_quick.group(1)
    maturin_image = re.search(r'maturin" build (.*)', script)
    assert maturin_image is not None
    assert all(flag in maturin_image.group(1).split() for flag in quick_flags)
    assert "-m rhai-python/Cargo.toml" in maturin_image.group(1)
    assert script.count("-c deploy/constraints.txt") == 2  # maturin itself and every runtime wheel pinned


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_build_steps_run_as_a_script_and_the_result_installs_offline(tmp_path: Path) -> None:
    wheels, venv, bin_dir = tmp_path / "wheels", tmp_path / "opt-rhaipool", tmp_path / "bin"
    built = subprocess.run(
        [str(BUILD_WHEELS), str(wheels), sys.executable], capture_output=True, text=True, check=False
    )
    assert built.returncode == 0, built.stderr[-4000:]
    names = sorted(p.name for p in wheels.iterdir())
    assert any(n.startswith("rhai_python-") and "abi3" in n for n in names), names
    assert any(n.startswith("rhaipool-") for n in names), names

    install = next(r for r in stages()[-1].args("RUN") if "--find-links /wheels" in r)
    command = re.sub(r"^--mount=\S+\s+", "", install)
    command = command.replace("/opt/rhaipool", str(venv)).replace("/wheels", str(wheels))
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)  # the image's `python` is its Python 3.11
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("VIRTUAL_ENV", None)
    installed = subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True, check=False)
    assert installed.returncode == 0, installed.stderr[-4000:]

    keys = subprocess.run(
        [str(venv / "bin" / "rhaipool"), "keys", "generate", str(tmp_path / "keys"), "node1"],
        capture_output=True, text=True, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert keys.returncode == 0, keys.stderr
    assert (tmp_path / "keys" / "node1.key_secret").exists()
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import coordinator, rhai; print(coordinator.__file__, rhai.__file__)"],
        capture_output=True, text=True, check=True, cwd=tmp_path,
    ).stdout  # fmt: skip
    assert str(ROOT) not in where and str(venv) in where, "the image's venv must not use the checkout"

    # Installed, not only checked out: the demo's examples ship inside the wheel.
    demo = subprocess.run(
        [str(venv / "bin" / "rhaipool"), "demo"], capture_output=True, text=True, check=False, cwd=tmp_path,
        env={k: v for k, v in env.items() if k != "PYTHONPATH"}, timeout=180,
    )  # fmt: skip
    assert demo.returncode == 0, demo.stderr[-4000:]
    assert "what the model would see" in demo.stdout
    assert "provider groq inference -> 'PONG'" in demo.stdout
