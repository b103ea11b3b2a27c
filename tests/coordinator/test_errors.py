"""The coordinator's exceptions: one tree under RhaipoolError, drawn in the README."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import coordinator.errors as errors
import proto.errors
from coordinator.errors import CallFailed, CompileError, RhaipoolError, ScriptError, ScriptTimeout


def public_exceptions() -> list[type[BaseException]]:
    found = []
    for module in (errors, proto.errors):
        found += [v for v in vars(module).values() if inspect.isclass(v) and issubclass(v, BaseException)]
    return found


README = Path(__file__).resolve().parents[2] / "README.md"


def test_every_exception_is_a_rhaipool_error_and_drawn_in_the_tree() -> None:
    block = re.search(r"<!-- error-tree -->\n```\n(.*?)```\n", README.read_text(), re.DOTALL)
    assert block, "README.md has no <!-- error-tree --> block"
    drawn = set(re.findall(r"(\w+) +(?:proto|coordinator)\.", block.group(1)))
    for cls in public_exceptions():
        assert issubclass(cls, RhaipoolError), cls
        assert cls.__name__ in drawn, f"{cls.__name__} missing from the drawn tree"


def test_all_is_sorted_and_complete() -> None:
    assert errors.__all__ == sorted(errors.__all__, key=str.casefold)
    assert {c.__name__ for c in public_exceptions()} <= set(errors.__all__) | set(proto.errors.__all__)


def test_structured_fields_and_messages() -> None:
    err = ScriptError("boom", rhai_class="ScriptThrow", line=3, column=4, value={"k": 1}, call_id=9,
                      tenant="t", script="s.rhai", sha="ab", worker_id="w1")  # fmt: skip
    assert isinstance(err, CallFailed) and str(err) == "s.rhai: boom"
    assert (err.call_id, err.tenant, err.sha, err.worker_id, err.cause, err.value) == (
        9,
        "t",
        "ab",
        "w1",
        "boom",
        {"k": 1},
    )
    assert ScriptTimeout("late").limit == "deadline"
    assert str(CompileError("bad token", name="x.rhai", line=2, column=5)) == "x.rhai:2:5: bad token"
