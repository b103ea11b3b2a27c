"""Turning what a worker said (or how it died) into the one outcome a call ends with.

Blame rules after a worker death (SECURITY.md, layer 9), over the calls *running* there: the inline
head, every threaded call, and every threaded call given up on whose late reply has not come
(``Placement.given_up``: it still runs):
- our kill for ``deadline`` or ``protocol`` blames the attempt we killed it for;
- a ``memory`` or ``heartbeat lost`` kill, and any death we did not cause (abort, segfault, any
  signal but SIGKILL/SIGTERM, a non-zero exit), blames the one call running, if only one was
  (a remote worker's lost heartbeat only makes suspects: its node or the link may have gone silent);
- with several running, such a death is ambiguous: it blames nobody and makes each running
  call's script a suspect (``coordinator._core.isolation``), whose calls then run alone until
  its next death has exactly one call to blame;
- a death we did not cause by SIGKILL/SIGTERM is external (an operator; the OOM killer's victim
  selection is not the script's doing) and blames nobody; so does a clean exit after GOODBYE (a
  GOODBYE followed by a crash excuses nothing);
- our other kills (frozen, unreachable, closing, spawn timeout) blame nobody.
A blamed call fails (unless its deadline already answered it) and strikes its script; an unblamed
call is re-run when safe (``may_rerun``) and only with the time left of its ``timeout``.  The
caller's timeout is the bound: a call is answered at its deadline whatever its worker does
(``Dispatcher``), and the kill grace delays only the kill.  A re-run is not sent to a worker that
has already exited (``Supervisor.alive`` asks its pidfd first), and one sent to a worker already
being killed does not count (``reached``): losing every worker at once costs a call one re-run,
not all of them.
"""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING, Any, Final

from coordinator._core.calls import MIN_ATTEMPT_TIME, CallResult
from coordinator._core.errors import (
    CallFailed,
    Cancelled,
    CompileError,
    LimitExceeded,
    LoadError,
    ScriptError,
    ScriptTimeout,
    WorkerCrashed,
    WorkerLost,
)
from coordinator._core.kills import KillReason
from proto import Error, ErrorClass, Op, Result

if TYPE_CHECKING:
    from coordinator._core.calls import Attempt, CallRecord
    from coordinator._core.config import PoolConfig
    from coordinator._core.workers import Placement

__all__ = [
    "after_death",
    "blame",
    "death_error",
    "described_functions",
    "fields",
    "from_error",
    "from_result",
    "lying_worker",
    "may_rerun",
    "out_of_time",
    "reached",
    "running",
    "timeout_error",
]

_EXTERNAL = (-signal.SIGKILL, -signal.SIGTERM)


def fields(call: CallRecord, worker: Placement | None) -> dict[str, Any]:
    """The structured fields every ``CallFailed`` carries."""
    return {
        "call_id": call.id,
        "tenant": call.tenant,
        "script": call.handle.name,
        "sha": call.handle.sha256,
        "worker_id": worker.id if worker is not None else "",
    }


def from_result(call: CallRecord, worker: Placement, msg: Result) -> CallResult:
    return CallResult(
        msg.value, msg.wall, msg.cpu, msg.peak_rss, msg.ops, tuple(msg.output), worker.id, call.retries + 1
    )


def from_error(call: CallRecord, worker: Placement, msg: Error) -> CallFailed | LoadError:
    """Map a wire ERROR to the coordinator's tree (a load's compile error is a ``LoadError``)."""
    if msg.cls == ErrorClass.COMPILE_ERROR and call.op == Op.LOAD:
        return CompileError(
            msg.message, name=call.handle.name, sha=call.handle.sha256, line=msg.line, column=msg.column
        )
    common = fields(call, worker) | {"cause": msg.kind or msg.cls}
    if msg.cls == ErrorClass.LIMIT_EXCEEDED:
        return LimitExceeded(msg.message, limit=msg.limit or "limit", rhai_class=msg.kind, **common)
    if msg.cls == ErrorClass.SCRIPT_TIMEOUT:
        return ScriptTimeout(msg.message, rhai_class=msg.kind, **common)
    if msg.cls == ErrorClass.CANCELLED:
        return Cancelled(msg.message, **common)
    if msg.cls == ErrorClass.INTERNAL:
        return WorkerCrashed(f"worker internal error: {msg.message}", exit_reason="internal error", **common)
    return ScriptError(
        msg.message,
        rhai_class=msg.kind or msg.cls,
        line=msg.line,
        column=msg.column,
        value=msg.value,
        **common,
    )


def described_functions(value: Any) -> tuple[tuple[str, int], ...] | None:
    """A load RESULT's ``{"functions": [[name, arity], ...]}`` as sorted pairs; ``None`` if malformed."""
    rows = value.get("functions") if isinstance(value, dict) else None
    if not isinstance(rows, list) or not all(
        isinstance(r, list) and len(r) == 2 and isinstance(r[0], str) and type(r[1]) is int and r[1] >= 0
        for r in rows
    ):
        return None
    return tuple(sorted((name, arity) for name, arity in rows))


def lying_worker(call: CallRecord, worker: Placement, what: str) -> CallFailed:
    """A worker answered with nonsense: it is stopped, and the call fails as if it had crashed."""
    return WorkerCrashed(
        f"worker {worker.id} answered wrongly ({what}) and was stopped",
        exit_reason="protocol",
        **fields(call, worker),
    )


def running(worker: Placement) -> list[Attempt]:
    """The attempts executing on ``worker``: the inline head, every threaded one (not queued inline
    ones), and the threaded ones given up on that have not answered yet (they still run)."""
    head = worker.head
    live = [a for a in worker.attempts.values() if a is head or not a.call.inline]
    return live + [a for a in worker.given_up.values() if a.wire_id not in worker.attempts]


_BLAMES_THE_ONE_RUNNING: Final = frozenset({KillReason.MEMORY, KillReason.HEARTBEAT_LOST})
"""Our kills that, like a crash, are caused by what runs: the one call running, if only one was."""


def blame(worker: Placement) -> tuple[Attempt | None, list[Attempt]]:
    """Which attempt caused this worker's death, or the suspects when that is ambiguous (docstring)."""
    process = worker.process
    reason = process.kill_reason
    if reason:
        if worker.kill_target is not None and reason.blames:
            return worker.kill_target, []
        if reason is KillReason.HEARTBEAT_LOST and not process.process.local:
            return None, running(worker)  # its node or the link may be what went silent: run apart
        if reason.blames and reason not in _BLAMES_THE_ONE_RUNNING:
            return None, running(worker)  # killed for a call we lost track of: all are suspects
        if reason not in _BLAMES_THE_ONE_RUNNING:
            return None, []
    else:
        returncode = process.process.returncode
        # a clean exit after GOODBYE or an external kill; GOODBYE then a crash excuses nothing
        if (process.goodbye and returncode == 0) or returncode in _EXTERNAL:
            return None, []
    suspects = running(worker)
    if len(suspects) == 1:
        return suspects[0], []
    return None, suspects


def timeout_error(call: CallRecord, worker: Placement, *, frozen: bool = False) -> CallFailed:
    """A call answered at its deadline while its worker still runs it (cancelled there; the worker is
    killed if it has not stopped within ``kill_grace``); ``frozen``: the worker is SIGSTOPped."""
    if frozen:
        tail = f"worker {worker.id} is stopped (SIGSTOP) and is killed, with no time left to re-run the call"
        return ScriptTimeout(
            f"no answer within its {call.timeout:g} s deadline; {tail}",
            cause=KillReason.FROZEN.value,
            **fields(call, worker),
        )
    return ScriptTimeout(
        f"no answer within its {call.timeout:g} s deadline; the call was cancelled", **fields(call, worker)
    )


def death_error(call: CallRecord, worker: Placement, *, blamed: bool, why_not_rerun: str = "") -> CallFailed:
    """The error of a call whose worker died: blamed → its own failure, else ``WorkerLost``."""
    common, process = fields(call, worker), worker.process
    reason = process.exit_reason
    if not blamed:
        detail = f"; {why_not_rerun}" if why_not_rerun else ""
        return WorkerLost(
            f"worker {worker.id} was lost ({reason}){detail}", exit_reason=reason, cause=reason, **common
        )
    if process.kill_reason is KillReason.DEADLINE:
        return ScriptTimeout(
            f"no answer within its {call.timeout:g} s deadline; worker {worker.id} was killed",
            cause=reason,
            **common,
        )
    tail = process.stderr_tail.decode("utf-8", "replace")
    if process.kill_reason is KillReason.MEMORY or "memory allocation" in tail or "MemoryError" in tail:
        return LimitExceeded(
            f"worker memory limit reached ({reason})", limit="memory", cause=reason, **common
        )
    return WorkerCrashed(
        f"worker {worker.id} crashed while running it: {reason}", exit_reason=reason, cause=reason, **common
    )


def may_rerun(call: CallRecord, max_retries: int, *, counts: bool = True) -> str:
    """Empty if an unblamed call may be re-run elsewhere, else why not.

    Side effects are what its host handler recorded (``HostHandler.sent``): an ``env_var`` or a
    request the egress policy refused does not stop a re-run; a request that may have left does.
    ``counts=False``: the lost try never reached its worker (``reached``), so no re-run is used up.
    """
    if counts and call.retries >= max_retries:
        return f"already re-run {call.retries} time(s)"
    if call.side_effects:
        return "a host call already sent a request (egress happened or may have)"
    if call.chunks:
        return "chunks were already delivered"
    return ""


def reached(attempt: Attempt, now: float, heartbeat: float) -> bool:
    """Whether the CALL reached a live worker: only then does losing it count against ``max_retries``.

    A worker that died within one heartbeat of the send, having sent nothing for this call (no host
    call, no chunk), had (almost surely) been killed already: the pidfd check before the send cannot
    see a SIGKILL still in progress.  (Any message would not do: a heartbeat may be in flight.)
    """
    said_something = attempt.host_seq > 0 or attempt.next_chunk > 0
    return said_something or now - attempt.sent_at > heartbeat


def after_death(
    attempt: Attempt, blamed: bool, config: PoolConfig, closing: bool, now: float
) -> CallFailed | None:
    """How an attempt whose worker died ends: its failure, or ``None`` to re-run the call."""
    call, worker = attempt.call, attempt.worker
    if blamed:
        return death_error(call, worker, blamed=True)
    counts = reached(attempt, now, config.deadlines.heartbeat)
    why_not = may_rerun(call, config.retry.max_retries, counts=counts)
    why_not = why_not or ("pool closing" if closing else "")
    if why_not:
        return death_error(call, worker, blamed=False, why_not_rerun=why_not)
    if call.time_left(now) < MIN_ATTEMPT_TIME:
        return out_of_time(call, worker)
    return None


def out_of_time(call: CallRecord, worker: Placement | None) -> CallFailed:
    """An unblamed call that lost its worker (``None``: waited for a new one) after its ``timeout``."""
    if worker is None:
        lost, cause = "it waited for a worker to re-run it", "re-run waited too long"
    else:
        cause = worker.process.exit_reason
        lost = f"worker {worker.id} was lost ({cause}) with no time left to re-run it"
    return ScriptTimeout(
        f"no answer within its {call.timeout:g} s deadline; {lost}", cause=cause, **fields(call, worker)
    )
