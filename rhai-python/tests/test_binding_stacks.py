"""Script stacks: concurrent calls reuse idle stacks, and what idle stacks hold stays bounded.

Every script call runs on a stack of its own (`src/stack.rs`). A worker with many provider calls in
flight starts and ends calls all the time; if ended calls' stacks are not kept, each call maps a
fresh one. Kept stacks must stay within the address-space share of `RLIMIT_AS`, must never cost a
later call its full-size stack, and must not keep a deep call's pages resident.

Each case runs in a subprocess (the stack pool is per process; some cases lower `RLIMIT_AS`). A call
finds its own stack from inside a host function: the stack pointer in `/proc/thread-self/syscall`
lies in one mapping of `/proc/self/maps`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

OPERATIONS = 200_000
FULL = OPERATIONS * 128  # the stack a call of this budget gets: 25 600 000 bytes (page-aligned)
FLOOR = 8 << 20  # what a call gets when the share is taken
PAGE = 4096
KEEP_HOT_KIB = 256

RUNNER = textwrap.dedent(
    """
    import json, resource, sys, threading
    if sys.argv[3] != "none":  # as a worker limits itself, before the binding allocates
        resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[3]), int(sys.argv[3])))
    import rhai

    FULL, FLOOR = %(full)d, %(floor)d

    def mappings():
        found, current = [], None
        for line in open("/proc/self/smaps"):
            fields = line.split()
            if fields[0].endswith(":"):
                if current and fields[0] == "Rss:":
                    current.append(int(fields[1]))
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            current = [start, end - start] if end - start in (FULL, FLOOR) else None
            if current:
                found.append(current)
        return found

    def stack_of_this_call():
        sp = int(open("/proc/thread-self/syscall").read().split()[-2], 16)
        for line in open("/proc/self/maps"):
            start, end = (int(x, 16) for x in line.split()[0].split("-"))
            if start <= sp < end:
                return [start, end - start]
        raise AssertionError("stack pointer in no mapping")

    # a deep call builds its array by copying (quadratic CPU): the stacks, not the CPU, are under test
    engine = rhai.Engine(max_operations=%(operations)d, max_array_size=50_000, max_cpu_seconds=60)
    seen = []
    gate = threading.Barrier(int(sys.argv[2]), timeout=60)
    def here():
        seen.append(stack_of_this_call())
        gate.wait()
        return 0
    engine.register_fn("here", here)
    script = engine.compile("fn main(n) { let a = []; for i in 0..n { a = [a]; } here() }")

    def burst(threads, depth=0):
        seen.clear()
        workers = [threading.Thread(target=script.call, args=("main", depth)) for _ in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert len(seen) == threads, seen
        return list(seen)

    threading.stack_size(1 << 20)
    n = int(sys.argv[2])
    report = {}
    for step in sys.argv[1].split(","):
        if step == "burst":
            report.setdefault("bursts", []).append(burst(n))
        elif step == "deep":
            report.setdefault("bursts", []).append(burst(n, 3_000))
        elif step == "alone":
            gate = threading.Barrier(1)
            report["alone"] = burst(1)[0]
            gate = threading.Barrier(n, timeout=60)
        report.setdefault("idle", []).append(mappings())
    print(json.dumps(report))
    """
) % {"full": FULL, "floor": FLOOR, "operations": OPERATIONS}


def _run(steps: str, threads: int, address_space: int | None = None) -> dict[str, list]:  # type: ignore[type-arg]
    env = dict(os.environ)
    args = [sys.executable, "-c", RUNNER, steps, str(threads), str(address_space or "none")]
    if address_space is not None:
        # As a worker is set up: few malloc arenas and a small mimalloc reservation, else their
        # reservations alone exhaust a small RLIMIT_AS.
        env.update(MALLOC_ARENA_MAX="2", MIMALLOC_ARENA_RESERVE="64MiB")
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False, env=env)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    report: dict[str, list] = json.loads(proc.stdout)  # type: ignore[type-arg]
    return report


def _starts(stacks: list[list[int]]) -> set[int]:
    return {s[0] for s in stacks}


@pytest.mark.timeout(150)
def test_the_stacks_of_many_concurrent_calls_are_kept_and_reused() -> None:
    report = _run("burst,burst", threads=16)
    first, second = report["bursts"]
    assert len(_starts(first)) == 16  # all sixteen calls were in flight at once, each on its own stack
    assert all(length == FULL for _, length in first)
    # After the burst its stacks are idle, not unmapped; the next burst runs on exactly those.
    assert _starts(report["idle"][0]) == _starts(first)
    assert _starts(second) == _starts(first)


@pytest.mark.timeout(150)
def test_idle_stacks_stay_within_the_address_space_share_and_never_cost_a_call_its_full_stack() -> None:
    address_space = 1 << 30
    share = address_space // 4
    report = _run("burst,alone,burst", threads=16, address_space=address_space)
    first, second = report["bursts"]
    full_in_first = sum(1 for _, length in first if length == FULL)
    # The share bounds the full-size stacks of concurrent calls; the rest get the floor.
    assert 0 < full_in_first <= share // FULL
    assert all(length in (FULL, FLOOR) for _, length in first + second)
    for idle in report["idle"]:
        assert sum(length + PAGE for _, length, *_ in idle) <= share
    # Idle floor stacks do not stand in for a full one while the share has room.
    assert report["alone"][1] == FULL
    assert sum(1 for _, length in second if length == FULL) == full_in_first


@pytest.mark.timeout(150)
def test_idle_stacks_give_a_deep_calls_pages_back() -> None:
    report = _run("burst,deep", threads=16)
    after_deep = report["idle"][1]
    assert _starts(after_deep) == _starts(report["bursts"][1])
    # Freeing a 3 000-level array touched several hundred KiB of each stack; kept idle, a stack
    # holds only its top, but for the two that may keep what a short call touched.
    assert sum(1 for _, _, rss in after_deep if rss > KEEP_HOT_KIB + 8) <= 2, after_deep


HELD_RUNNER = textwrap.dedent(
    """
    import resource, sys, threading
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))  # a share of 256 MiB: 4 full stacks
    import rhai

    engine = rhai.Engine(max_operations=500_000, max_array_size=50_000, max_cpu_seconds=60)
    release, held = threading.Event(), threading.Semaphore(0)
    def wait():
        held.release()
        release.wait(60)
        return 0
    engine.register_fn("wait", wait)
    script = engine.compile(
        "fn hold() { wait() }\\n"
        "fn chain() { let f = || 0; for i in 0..90000 { let g = f; f = || g.call() + 1; } 0 }"
    )
    threading.stack_size(2 << 20)  # a worker's script threads
    holders = [threading.Thread(target=script.call, args=("hold",)) for _ in range(16)]
    for t in holders:
        t.start()
    for _ in holders:
        assert held.acquire(timeout=60)
    outcome = []
    def attack():
        try:
            outcome.append(script.call("chain", timeout=60))
        except rhai.RhaiError as exc:
            outcome.append(type(exc).__name__)
    attacker = threading.Thread(target=attack)
    attacker.start()
    attacker.join()
    release.set()
    for t in holders:
        t.join()
    print(outcome[0])
    """
)


@pytest.mark.timeout(150)
def test_a_call_on_the_floor_stack_gets_the_budget_that_stack_holds() -> None:
    """16 calls hold full stacks past the share: the 17th gets the floor, and an operation budget the
    floor can free (a closure chain its engine's budget allows would overflow it: SIGSEGV)."""
    env = dict(os.environ, MALLOC_ARENA_MAX="2", MIMALLOC_ARENA_RESERVE="64MiB")
    proc = subprocess.run(
        [sys.executable, "-c", HELD_RUNNER], capture_output=True, text=True, timeout=120, check=False, env=env
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.strip() == "TooManyOperations"
