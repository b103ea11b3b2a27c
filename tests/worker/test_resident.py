"""The worker's resident entry store: deltas, versions, tenant scoping and bounds.

The store is tested directly, then through a real worker process on a bare
ROUTER socket (no coordinator), where a resident CALL must render exactly what
the same CALL with the whole list in ``args`` renders.
"""

from __future__ import annotations

import hashlib
import secrets
import tempfile
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest
import rhai
from bare_worker import BareWorker

from proto import Call, Error, Ready, Result
from worker.engine import ScriptFailure
from worker.resident import DEFAULT_MAX_BYTES, ResidentStore

KEY = secrets.token_urlsafe(32)


def item(i: int, size: int = 8) -> dict[str, Any]:
    return {"content": f"e{i}" + "x" * size, "tokens": i}


def whole(version: int, entries: list[Any], key: str = KEY) -> dict[str, Any]:
    return {"key": key, "version": version, "base": None, "drop": [], "entries": entries}


def delta(version: int, base: int, drop: list[int], append: list[Any], key: str = KEY) -> dict[str, Any]:
    return {"key": key, "version": version, "base": base, "drop": drop, "entries": append}


def spliced(store: ResidentStore, resident: dict[str, Any], tenant: str = "t") -> list[Any]:
    args = store.args_for(tenant, resident, [{"region": {"name": "r"}, "entries": []}, 7])
    assert args[1] == 7 and args[0]["region"] == {"name": "r"}
    return list(args[0]["entries"])


def missing(store: ResidentStore, resident: dict[str, Any], tenant: str = "t") -> None:
    with pytest.raises(ScriptFailure) as caught:
        store.args_for(tenant, resident, [{"entries": []}])
    assert caught.value.cls == "ResidentMissing"


def test_whole_then_deltas_rebuild_the_list() -> None:
    store = ResidentStore()
    model = [item(i) for i in range(6)]
    assert spliced(store, whole(1, model)) == model
    model = [*model, item(6), item(7)]
    assert spliced(store, delta(2, 1, [], [item(6), item(7)])) == model
    model = model[3:]  # the oldest three: the overflow/eviction shape
    assert spliced(store, delta(3, 2, [0, 1, 2], [])) == model
    model = [m for k, m in enumerate(model) if k not in (1, 3)] + [item(9)]
    assert spliced(store, delta(4, 3, [1, 3], [item(9)])) == model
    model = [m for k, m in enumerate(model) if k not in (0, 2)]
    assert spliced(store, delta(5, 4, [0, 2], [])) == model  # the oldest and one in the middle
    assert spliced(store, delta(5, 5, [], [])) == model  # unchanged: same version
    assert spliced(store, delta(6, 5, list(range(len(model))), [item(10)])) == [item(10)]  # replace
    assert spliced(store, delta(7, 6, [0], [])) == []  # clear
    assert store.bytes == 0 and len(store) == 1


def test_the_list_in_args_does_not_alias_the_message() -> None:
    store = ResidentStore()
    sent = [item(0)]
    spliced(store, whole(1, sent))
    sent.append(item(1))  # the decoded message's list is not the stored one
    assert spliced(store, delta(1, 1, [], [])) == [item(0)]


def test_wrong_or_unknown_base_is_missing_and_forgets_the_stale_list() -> None:
    store = ResidentStore()
    missing(store, delta(1, 0, [], [item(0)]))  # never received
    spliced(store, whole(3, [item(0), item(1)]))
    missing(store, delta(5, 4, [], [item(2)]))  # another version: the stale list is dropped too
    missing(store, delta(4, 3, [], [item(2)]))
    assert len(store) == 0 and store.bytes == 0


def test_out_of_range_drop_is_missing() -> None:
    store = ResidentStore()
    spliced(store, whole(1, [item(0), item(1)]))
    missing(store, delta(2, 1, [0, 2], []))
    assert spliced(store, whole(2, [item(5)])) == [item(5)]


def test_tenants_and_keys_are_separate_slots() -> None:
    store = ResidentStore()
    spliced(store, whole(1, [item(1)]), tenant="acme")
    missing(store, delta(2, 1, [], [item(2)]), tenant="globex")  # same key, other tenant: nothing there
    other = secrets.token_urlsafe(32)
    missing(store, delta(2, 1, [], [item(2)], key=other), tenant="acme")
    spliced(store, whole(1, [item(7)]), tenant="globex")
    assert spliced(store, delta(2, 1, [], [item(2)]), tenant="acme") == [item(1), item(2)]
    assert spliced(store, delta(2, 1, [], []), tenant="globex") == [item(7)]


def test_count_bound_evicts_least_recently_used() -> None:
    store = ResidentStore(max_keys=2)
    keys = [secrets.token_urlsafe(32) for _ in range(3)]
    for n, key in enumerate(keys[:2]):
        spliced(store, whole(1, [item(n)], key=key))
    spliced(store, delta(1, 1, [], [], key=keys[0]))  # touch: keys[1] is now the oldest
    spliced(store, whole(1, [item(2)], key=keys[2]))
    assert len(store) == 2
    missing(store, delta(1, 1, [], [], key=keys[1]))
    assert spliced(store, delta(1, 1, [], [], key=keys[0])) == [item(0)]


def test_byte_bound_counts_msgpack_sizes_and_skips_oversized_lists() -> None:
    big = [item(i, 1000) for i in range(10)]
    size = sum(len(msgpack.packb(x)) for x in big)
    store = ResidentStore(max_bytes=size + 10)
    assert spliced(store, whole(1, big)) == big and store.bytes == size
    assert spliced(store, delta(2, 1, [], [item(99, 1000)])) == [*big, item(99, 1000)]  # used, not kept
    assert len(store) == 0 and store.bytes == 0
    missing(store, delta(3, 2, [], []))
    spliced(store, whole(1, big[:5]))
    spliced(store, whole(1, big[5:], key=secrets.token_urlsafe(32)))
    spliced(store, whole(1, big[:3], key=secrets.token_urlsafe(32)))  # the first list goes
    assert store.bytes <= size + 10 and len(store) == 2
    missing(store, delta(2, 1, [], []))
    assert DEFAULT_MAX_BYTES >= 16 << 20  # any list that fits in one CALL body fits in the store


def test_lists_are_kept_in_rhai_form_and_each_hook_gets_its_own_copy() -> None:
    store = ResidentStore()
    script = rhai.Engine().compile(
        "fn render(ctx) { ctx.entries[0].tokens = 99; ctx.entries.pop(); ctx.entries }"
    )
    args = store.args_for("t", whole(1, [item(0), item(1)]), [{"entries": []}])
    assert isinstance(args[0]["entries"], rhai.Array)
    assert script.call("render", *args) == [{**item(0), "tokens": 99}]
    again = store.args_for("t", delta(2, 1, [], [item(2)]), [{"entries": []}])
    assert script.call("render", *again) == [{**item(0), "tokens": 99}, item(1)]
    assert spliced(store, delta(2, 2, [], [])) == [item(0), item(1), item(2)]


def test_an_item_with_no_rhai_form_fails_the_call_as_an_invalid_value() -> None:
    store = ResidentStore()
    with pytest.raises(ScriptFailure) as caught:
        store.args_for("t", whole(1, [item(0), {"bad": object()}]), [{"entries": []}])
    assert caught.value.cls == "InvalidValue" and len(store) == 0 and store.bytes == 0
    spliced(store, whole(1, [item(0)]))
    with pytest.raises(ScriptFailure) as caught:
        store.args_for("t", delta(2, 1, [0], [item(1), object()]), [{"entries": []}])
    assert caught.value.cls == "InvalidValue"
    missing(store, delta(2, 1, [], []))  # the list is not kept half-changed: the next call resends it
    assert len(store) == 0 and store.bytes == 0


# -- a real worker ------------------------------------------------------------

SOURCE = """
fn render(ctx) {
    let out = `${ctx.region.name}:`;
    for e in ctx.entries { out += ` ${e.content}/${e.tokens}`; }
    out
}
"""
SHA = hashlib.sha256(SOURCE.encode()).hexdigest()


class Worker(BareWorker):
    """A real worker on a bare ROUTER socket, driven one region render at a time."""

    def __init__(self, tmp: str) -> None:
        super().__init__(tmp)
        self.sourced = False

    def render(self, entries: list[Any], resident: dict[str, Any] | None = None, tenant: str = "t") -> Any:
        call_id = next(self.ids)
        source, self.sourced = (None if self.sourced else SOURCE), True
        ctx = {"region": {"name": "r"}, "entries": entries}
        call = Call(
            call_id, "call", "region", SHA, "render", [ctx], 5.0, tenant, "r.rhai", source, 1, resident
        )
        self.send(call)
        reply = self.recv()
        assert reply.id == call_id
        return reply


@pytest.fixture
def worker() -> Iterator[Worker]:
    with tempfile.TemporaryDirectory() as tmp:
        peer = Worker(tmp)
        try:
            assert isinstance(peer.recv(), Ready)
            yield peer
        finally:
            peer.close()


def value(reply: Any) -> Any:
    assert isinstance(reply, Result), reply
    return reply.value


def test_worker_renders_resident_lists_exactly_like_shipped_ones(worker: Worker) -> None:
    model = [item(i) for i in range(5)]
    expected = value(worker.render(model))
    assert expected.startswith("r: e0") and value(worker.render([], whole(1, model))) == expected
    steps: list[tuple[list[int], list[Any]]] = [
        ([], [item(5)]),
        ([0, 1], []),
        ([2], [item(6), item(7)]),
        ([], []),
    ]
    version = 1
    for drop, append in steps:
        model = [m for k, m in enumerate(model) if k not in drop] + append
        base, version = version, version + (1 if drop or append else 0)
        assert value(worker.render([], delta(version, base, drop, append))) == value(worker.render(model))


def test_worker_answers_resident_missing_without_running_and_keeps_serving(worker: Worker) -> None:
    reply = worker.render([], delta(2, 1, [], [item(1)]))
    assert isinstance(reply, Error) and reply.cls == "ResidentMissing" and reply.value is None
    value(worker.render([], whole(1, [item(0)])))
    other_tenant = worker.render([], delta(2, 1, [], [item(1)]), tenant="other")
    assert isinstance(other_tenant, Error) and other_tenant.cls == "ResidentMissing"
    assert value(worker.render([], delta(2, 1, [], [item(1)]))) == "r: e0xxxxxxxx/0 e1xxxxxxxx/1"
