"""Every region scenario in ``scenarios/`` replayed through rhaipool and compared with the reference runtime's
own output for it (``<name>.reference.json``, measured by the Leviath oracle, see ``docs/differences.md``).

Compared field by field and strictly by type, as the oracle compares: each step's outcome fields, the
number of warnings (their wording is each runtime's own), the assembled request of every render, and the
final entries.  Two normalisations are the oracle's glue, not behaviour: an eviction's ``dropped`` list is
compared as a set (the oracle lists entry order, rhaipool phase order), and a load error names the script
as the scenario writes it (``rhaipool test`` resolves it to a path first).

A scenario in ``DELIBERATE`` is a difference rhaipool keeps on purpose; it must still differ, so a change
that closes it fails here and the docs' list gets updated with it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from coordinator._cli.scenario import load_scenario, run_scenario
from coordinator.regions import RegionLoadError

if TYPE_CHECKING:
    from region_pool import Pooled

SCENARIOS = Path(__file__).parent / "scenarios"
NAMES = sorted(p.name.removesuffix(".scenario.json") for p in SCENARIOS.glob("*.scenario.json"))

#: Scenario -> the entry of docs/differences.md that explains it.
DELIBERATE = {
    "evict_nothing_needed": "window eviction with the room already free",
    "evict_nothing_needed_hook": "window eviction with the room already free",
    "on_write_replace_oversize": "an oversize replace reports its error",
    "replace_reject_region": "an oversize replace reports its error",
    "load_overload_first_bad": "hook arity with overloads",
    "load_on_write_overload": "hook arity with overloads",
    "load_private_render": "a private render",
    "render_fail_parse_json": "JSON functions in region hooks",
    "render_fail_parse_json_empty": "JSON functions in region hooks",
    "helpers_parse_json_object": "JSON functions in region hooks",
    "helpers_map_to_json_method": "JSON functions in region hooks",
    "helpers_to_json_special": "JSON functions in region hooks",
}

STEP_FIELDS = {
    "write": ("outcome", "content", "tokens", "dropped_indices", "error"),
    "replace": ("outcome", "content", "tokens", "dropped_indices", "error"),
    "render": ("system", "messages", "fallback"),
    "evict": ("freed", "dropped"),
}


def strict(value: Any) -> Any:
    """A form where ``1``, ``1.0`` and ``True`` stay different under ``==`` (the oracle is type-strict)."""
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strict(v) for v in value]
    return (type(value).__name__, value)


def rhaipool_side(pooled: Pooled, name: str) -> dict[str, Any]:
    """What the oracle records for rhaipool, in the shape of ``<name>.reference.json``."""
    path = SCENARIOS / f"{name}.scenario.json"
    scenario = load_scenario(path)
    try:
        result = pooled.run(run_scenario(scenario, pooled.pool))
    except RegionLoadError as exc:
        written = json.loads(path.read_text(encoding="utf-8"))["script"]
        return {"error": str(exc).replace(str(scenario.script), written)}
    steps = []
    for index, step in enumerate(result.to_json()["steps"]):
        shaped = {"op": step["op"], **{k: step.get(k) for k in STEP_FIELDS[step["op"]]}}
        shaped["warnings"] = len(step.get("warnings", []))
        if step["op"] == "render":
            shaped["assembled"] = result.requests[index].to_json()
        steps.append(shaped)
    return {"steps": steps, "entries": result.to_json()["entries"]}


def comparable(doc: dict[str, Any]) -> Any:
    """The oracle's glue normalisations (see the module docstring), then the type-strict form."""
    doc = json.loads(json.dumps(doc))
    for step in doc.get("steps", []):
        if step["op"] == "evict":
            step["dropped"] = sorted(step["dropped"])
    return strict(doc)


def test_every_deliberate_scenario_exists() -> None:
    assert set(DELIBERATE) <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_scenario_matches_the_reference(pooled: Pooled, name: str) -> None:
    reference = json.loads((SCENARIOS / f"{name}.reference.json").read_text(encoding="utf-8"))
    ours = comparable(rhaipool_side(pooled, name))
    if name in DELIBERATE:
        assert ours != comparable(reference), f"{name} now matches the reference: update docs/differences.md"
    else:
        assert ours == comparable(reference)
