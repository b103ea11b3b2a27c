"""The ``rhaipool`` command line end to end: real processes, real workers, real exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
CLI = [sys.executable, "-c", "from coordinator._cli.main import main; main()"]


def rhaipool(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT, check=False
    )


def test_version() -> None:
    out = rhaipool("--version")
    assert out.returncode == 0
    assert out.stdout.startswith("rhaipool, version ")


@pytest.mark.parametrize(
    ("kind", "path"),
    [("region", "examples/regions/brain.rhai"), ("provider", "examples/providers/groq.rhai")],
)
def test_validate_accepts_the_examples(kind: str, path: str) -> None:
    out = rhaipool("validate", path, "--kind", kind, "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["valid"] is True
    assert report["error"] is None


def test_validate_region_without_render_fails_with_the_reference_message(tmp_path: Path) -> None:
    script = tmp_path / "no_render.rhai"
    script.write_text("fn on_write(ctx) { () }")
    out = rhaipool("validate", str(script), "--kind", "region", "--json")
    assert out.returncode == 1
    assert "script must define fn render(ctx)" in json.loads(out.stdout)["error"]["message"]


def test_validate_rejects_eval_at_compile_time(tmp_path: Path) -> None:
    script = tmp_path / "eval.rhai"
    script.write_text('fn render(ctx) { eval("1") }')
    out = rhaipool("validate", str(script), "--kind", "region")
    assert out.returncode != 0
    assert "eval" in out.stderr


def test_doctor_reports_every_layer_active() -> None:
    out = rhaipool("doctor", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["ok"] is True
    (worker,) = report["workers"]
    layers = {
        name: info for name, info in worker["sandbox"].items() if isinstance(info, dict) and "active" in info
    }
    for layer in ("env", "no_new_privs", "pdeathsig", "rlimits", "netns", "landlock", "seccomp"):
        assert layers[layer]["active"], (layer, layers[layer])


def test_demo_shows_a_region_and_a_provider_through_the_pool() -> None:
    out = rhaipool("demo", timeout=120)
    assert out.returncode == 0, out.stderr
    assert "what the model would see" in out.stdout
    assert "inference -> 'PONG'" in out.stdout
    assert "stream    -> " in out.stdout
    assert "provider groq inference -> 'PONG'" in out.stdout  # the same through rhaipool serve
    assert "SIGTERM -> drained and exited 0" in out.stdout


def test_bench_is_not_run_by_tests_but_lists_its_benchmarks() -> None:
    out = rhaipool("bench", "--help")
    assert out.returncode == 0
    for name in ("binding", "pool", "providers", "regions"):
        assert name in out.stdout
