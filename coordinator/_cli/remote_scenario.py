"""``rhaipool test SCENARIO --server URL``: replay a scenario against a running service.

The scenario is checked locally first (as ``test`` does), then its script is stored on the service under
a temporary name, a region of the scenario's name is created from it, the steps run through the HTTP
API, and both are deleted again whatever happened. The result is a :class:`ScenarioResult` like the
local run's, so the output, the ``--json`` document and the exit codes are the same. The service's own
hook deadline applies (``--timeout`` is the local pool's).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from coordinator._cli.errors import RemoteLoadError
from coordinator._cli.scenario import ExpectationFailure, Scenario, ScenarioResult, check_step, render_text
from coordinator.client import AsyncClient, ServiceError
from coordinator.regions.assembly import AssembledRequest, RegionOutput, assemble
from coordinator.regions.model import Message, SystemBlock

__all__ = ["RemoteLoadError", "run_remote_scenario"]

_ENTRY_FIELDS: Final = ("kind", "key", "tool_calls", "tool_call_id", "tool_name", "is_error", "tainted")
_META_FIELDS: Final[tuple[str, ...]] = ("stage_name", "stage_iterations", "model")


@dataclass(frozen=True, slots=True)
class _RegionState:
    """The region as the service reports it (what ``expect.entries`` / ``expect.tokens`` read)."""

    entries: list[dict[str, Any]]
    current_tokens: int


class _Replay:
    """One scenario on one service: the temporary script name and the way back to local paths."""

    def __init__(self, scenario: Scenario, client: AsyncClient) -> None:
        self.scenario, self.client = scenario, client
        self.script = f"rhaipool-test-{secrets.token_hex(6)}"
        self.region = scenario.name
        # The service names its copy of the script by a path of its own: show the scenario's instead.
        self._remote_path = re.compile(r"[^\s'\"()]*" + re.escape(self.script) + r"(\.rhai)?")

    def local(self, text: str) -> str:
        """``text`` with the service's name for the script replaced by the scenario's path."""
        return self._remote_path.sub(str(self.scenario.script).replace("\\", "\\\\"), text)

    async def open(self) -> str:
        """Store the script and create the region; its sha256."""
        s = self.scenario
        try:
            source = s.script.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise RemoteLoadError(f"cannot read custom region script '{s.script}': {exc}") from exc
        await self.client.put_script("region_hook", self.script, source)
        try:
            made = await self.client.create_region(
                self.region, script=self.script, budget=s.budget, persistent=s.persistent,
                admission=s.admission, volatility=s.volatility,
            )  # fmt: skip
        except ServiceError as exc:
            if exc.status == 409:
                raise RemoteLoadError(
                    f"the service already has a region named '{self.region}' for this token's tenant"
                ) from exc
            if exc.status == 422:
                raise RemoteLoadError(self.local(exc.message)) from exc
            raise
        return str(made.get("sha256") or "")

    async def close(self, opened: bool) -> None:
        """Delete the region (if this replay created it) and the script; best effort."""
        if opened:
            try:
                await self.client.delete_region(self.region)
            except ServiceError:
                pass
        try:
            await self.client.delete_script("region_hook", self.script)
        except ServiceError:
            pass

    async def step(self, op: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """One step through the API; its report as the local run writes it."""
        c, name = self.client, self.region
        if op == "write":
            entry = {k: body[k] for k in _ENTRY_FIELDS if k in body}
            report = await c.write(name, body["content"], body.get("tokens"), **entry)
        elif op == "replace":
            report = await c.replace(name, body["content"], body.get("tokens"))
        elif op == "evict":
            report = await c.evict(name, body["needed_tokens"])
        else:
            report = await c.render(name, **self._meta(body))
        if isinstance(report.get("warnings"), list):
            report["warnings"] = [self.local(str(w)) for w in report["warnings"]]
        return dict(report)

    def _meta(self, override: Mapping[str, Any]) -> dict[str, Any]:
        """The scenario's meta with the step's on top (the service fills the window as a local run)."""
        meta = {**self.scenario.meta, **{k: v for k, v in override.items() if k in _META_FIELDS}}
        out: dict[str, Any] = {k: meta[k] for k in _META_FIELDS if k in meta}
        window = {**self.scenario.meta.get("window", {}), **override.get("window", {})}
        return {**out, "window": window} if window else out

    async def state(self) -> _RegionState:
        """The region's entries (without timestamps, as a local run shows them) and tokens."""
        got = await self.client.get_region(self.region)
        entries = [{k: v for k, v in e.items() if k not in ("timestamp", "tainted")} for e in got["entries"]]
        return _RegionState(entries, int(got["current_tokens"]))


def _request(report: Mapping[str, Any]) -> AssembledRequest:
    """What the model would see of a render report (a custom region: a preamble), as locally."""
    system = tuple(
        SystemBlock(b["text"], b["cache_hint"], b["volatility"], b["region"]) for b in report["system"]
    )
    messages = tuple(
        Message(
            m["role"],
            m["content"] if isinstance(m["content"], str) else tuple(m["content"]),
            bool(m.get("cache_breakpoint", False)),
        )
        for m in report["messages"]
    )
    return assemble([RegionOutput(system, messages, preamble=True)])


async def run_remote_scenario(scenario: Scenario, client: AsyncClient) -> ScenarioResult:
    """Replay every step on the service; raises :class:`RemoteLoadError` (nothing ran) or ServiceError."""
    replay = _Replay(scenario, client)
    opened = False
    try:
        sha = await replay.open()
        opened = True
        steps: list[dict[str, Any]] = []
        requests: dict[int, AssembledRequest] = {}
        failures: list[ExpectationFailure] = []
        for index, (op, body) in enumerate(scenario.steps):
            steps.append(await replay.step(op, body))
            text = None
            if op == "render":
                requests[index] = _request(steps[-1])
                text = render_text(requests[index])
            expect = body.get("expect", {})
            state = await replay.state() if "entries" in expect or "tokens" in expect else _RegionState([], 0)
            failures += check_step(index, op, body, steps[-1], state, text)
        entries = (await replay.state()).entries
    finally:
        await replay.close(opened)
    return ScenarioResult(scenario, sha, steps, entries, requests, failures)
