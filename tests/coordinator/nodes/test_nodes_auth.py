"""The coordinator's CurveZMQ gate over real sockets on 127.0.0.1: who gets in, who is refused, and when.

Each case waits for the client's own handshake verdict (a socket-monitor event), so nothing here depends
on timing: an admitted client's message must arrive, a refused one's must not.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import zmq
import zmq.asyncio
from zmq.utils.monitor import recv_monitor_message

from coordinator.nodes import (
    AuthorizedKeys,
    KeyFileError,
    curve_authenticator,
    curve_client,
    curve_server,
    generate,
    revoke,
)
from coordinator.nodes.keys import read_public_key

VERDICTS = {
    zmq.EVENT_HANDSHAKE_SUCCEEDED,
    zmq.EVENT_HANDSHAKE_FAILED_AUTH,
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL,
}
VERDICT_WAIT = 20.0  # seconds: generous, the handshake takes milliseconds on an idle machine


@dataclass
class Server:
    context: zmq.asyncio.Context
    socket: zmq.asyncio.Socket
    address: str
    server_key: Path


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    generate(tmp_path / "coordinator", "coordinator")
    generate(tmp_path / "authorized", "node1")
    generate(tmp_path / "authorized", "node2")
    generate(tmp_path / "elsewhere", "intruder")
    return tmp_path


@asynccontextmanager
async def running_server(keys: Path) -> AsyncIterator[Server]:
    context = zmq.asyncio.Context()
    try:
        with curve_authenticator(context, keys / "authorized") as authenticator:
            socket = context.socket(zmq.ROUTER)
            try:
                curve_server(socket, keys / "coordinator" / "coordinator.key_secret", authenticator)
                port = socket.bind_to_random_port("tcp://127.0.0.1")
                yield Server(
                    context, socket, f"tcp://127.0.0.1:{port}", keys / "coordinator" / "coordinator.key"
                )
            finally:
                socket.close(linger=0)
    finally:
        context.term()


async def attempt(server: Server, secret_key: Path | None, payload: bytes) -> tuple[int, list[bytes] | None]:
    """Connect (CURVE with ``secret_key``, or plain when None), send ``payload``;
    (verdict, what the server got)."""
    client = server.context.socket(zmq.DEALER)
    monitor = client.get_monitor_socket(zmq.EVENT_ALL)
    try:
        if secret_key is not None:
            curve_client(client, secret_key, server.server_key)
        client.connect(server.address)
        await client.send(payload)
        verdict = await asyncio.wait_for(_first_verdict(monitor), VERDICT_WAIT)
        received = None
        if verdict == zmq.EVENT_HANDSHAKE_SUCCEEDED or await server.socket.poll(300):
            received = await asyncio.wait_for(server.socket.recv_multipart(), VERDICT_WAIT)
        return verdict, received
    finally:
        client.disable_monitor()
        monitor.close(linger=0)
        client.close(linger=0)


async def _first_verdict(monitor: zmq.asyncio.Socket) -> int:
    while True:
        event = (await recv_monitor_message(monitor))["event"]
        if event in VERDICTS:
            return int(event)


def test_authorized_node_connects_and_exchanges_a_message(keys: Path) -> None:
    async def scenario() -> tuple[int, list[bytes] | None, bytes]:
        async with running_server(keys) as server:
            verdict, received = await attempt(server, keys / "authorized" / "node1.key_secret", b"hello")
            # and the reply comes back over the same encrypted connection
            client = server.context.socket(zmq.DEALER)
            try:
                curve_client(client, keys / "authorized" / "node2.key_secret", server.server_key)
                client.connect(server.address)
                await client.send(b"ping")
                identity, message = await asyncio.wait_for(server.socket.recv_multipart(), VERDICT_WAIT)
                await server.socket.send_multipart([identity, message + b"-pong"])
                reply = await asyncio.wait_for(client.recv(), VERDICT_WAIT)
            finally:
                client.close(linger=0)
            return verdict, received, reply

    verdict, received, reply = asyncio.run(scenario())
    assert verdict == zmq.EVENT_HANDSHAKE_SUCCEEDED
    assert received is not None and received[-1] == b"hello"
    assert reply == b"ping-pong"


def test_unknown_key_is_refused(keys: Path) -> None:
    async def scenario() -> tuple[int, list[bytes] | None]:
        async with running_server(keys) as server:
            return await attempt(server, keys / "elsewhere" / "intruder.key_secret", b"let me in")

    assert asyncio.run(scenario()) == (zmq.EVENT_HANDSHAKE_FAILED_AUTH, None)


def test_plain_peer_gets_nothing_through(keys: Path) -> None:
    async def scenario() -> tuple[int, list[bytes] | None]:
        async with running_server(keys) as server:
            return await attempt(server, None, b"plain text")

    assert asyncio.run(scenario()) == (zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, None)


def test_revoked_key_is_refused_at_its_next_handshake_without_restart(keys: Path) -> None:
    authorized = keys / "authorized"

    async def scenario() -> list[tuple[int, bool]]:
        seen = []
        async with running_server(keys) as server:
            seen.append(await attempt(server, authorized / "node1.key_secret", b"before"))
            revoke(authorized, "node1")
            seen.append(await attempt(server, authorized / "revoked" / "node1.key_secret", b"after"))
            # revocation is by key: a stray copy of the public file under another name does not undo it
            shutil.copy(authorized / "revoked" / "node1.key", authorized / "again.key")
            seen.append(await attempt(server, authorized / "revoked" / "node1.key_secret", b"copied back"))
            seen.append(await attempt(server, authorized / "node2.key_secret", b"other node"))
        return [(verdict, received is not None) for verdict, received in seen]

    assert asyncio.run(scenario()) == [
        (zmq.EVENT_HANDSHAKE_SUCCEEDED, True),
        (zmq.EVENT_HANDSHAKE_FAILED_AUTH, False),
        (zmq.EVENT_HANDSHAKE_FAILED_AUTH, False),
        (zmq.EVENT_HANDSHAKE_SUCCEEDED, True),
    ]


@pytest.mark.parametrize("others", [(), ("a-node",), ("node2",)])
def test_a_revoke_is_refused_at_the_next_handshake_whatever_else_the_directory_holds(
    tmp_path: Path, others: tuple[str, ...]
) -> None:
    """Issue 21: a rename leaves name, inode, size and mtime as they were, only the folder changes.

    With node-1 alone or sorted last (and ``revoked/`` empty), a listing that ran the two folders together
    did not change, and the revoked key kept joining.
    """
    generate(tmp_path / "coordinator", "coordinator")
    authorized = tmp_path / "authorized"
    for name in ("node-1", *others):
        generate(authorized, name)

    async def scenario() -> list[int]:
        async with running_server(tmp_path) as server:
            before, _ = await attempt(server, authorized / "node-1.key_secret", b"before")
            revoke(authorized, "node-1")
            after, _ = await attempt(server, authorized / "revoked" / "node-1.key_secret", b"after")
            return [before, after]

    assert asyncio.run(scenario()) == [zmq.EVENT_HANDSHAKE_SUCCEEDED, zmq.EVENT_HANDSHAKE_FAILED_AUTH]


def test_a_deleted_key_is_refused_at_its_next_handshake(keys: Path) -> None:
    authorized = keys / "authorized"
    (keys / "kept").mkdir()
    shutil.copy(authorized / "node2.key_secret", keys / "kept" / "node2.key_secret")

    async def scenario() -> list[int]:
        async with running_server(keys) as server:
            seen = [(await attempt(server, authorized / "node2.key_secret", b"before"))[0]]
            (authorized / "node2.key").unlink()
            seen.append((await attempt(server, keys / "kept" / "node2.key_secret", b"after"))[0])
            seen.append((await attempt(server, authorized / "node1.key_secret", b"other"))[0])
            return seen

    assert asyncio.run(scenario()) == [
        zmq.EVENT_HANDSHAKE_SUCCEEDED,
        zmq.EVENT_HANDSHAKE_FAILED_AUTH,
        zmq.EVENT_HANDSHAKE_SUCCEEDED,
    ]


def test_a_key_replaced_in_place_is_seen_at_once(keys: Path) -> None:
    """Same name, same inode, same size (every z85 key is 40 characters): the ctime still moves."""
    authorized = keys / "authorized"
    gate = AuthorizedKeys(authorized)
    node1 = read_public_key(authorized / "node1.key")
    intruder = read_public_key(keys / "elsewhere" / "intruder.key")
    assert (gate.allows(node1), gate.allows(intruder)) == (True, False)
    target = authorized / "node1.key"
    inode, mtime = target.stat().st_ino, target.stat().st_mtime_ns
    with target.open("r+b") as file:  # rewrite the bytes of the same inode, then put the mtime back
        file.write((keys / "elsewhere" / "intruder.key").read_bytes())
        file.truncate()
    os.utime(target, ns=(mtime, mtime))
    assert target.stat().st_ino == inode
    assert (gate.allows(node1), gate.allows(intruder)) == (False, True)


def test_key_added_while_running_is_accepted_at_its_next_handshake(keys: Path) -> None:
    async def scenario() -> tuple[int, int]:
        async with running_server(keys) as server:
            newcomer = keys / "newcomers"
            generate(newcomer, "node3")
            refused, _ = await attempt(server, newcomer / "node3.key_secret", b"early")
            shutil.copy(newcomer / "node3.key", keys / "authorized" / "node3.key")
            admitted, _ = await attempt(server, newcomer / "node3.key_secret", b"now")
            return refused, admitted

    assert asyncio.run(scenario()) == (zmq.EVENT_HANDSHAKE_FAILED_AUTH, zmq.EVENT_HANDSHAKE_SUCCEEDED)


def test_a_malformed_file_in_the_directory_locks_out_nobody_else(keys: Path) -> None:
    (keys / "authorized" / "broken.key").write_text("not a certificate\n")

    async def scenario() -> int:
        async with running_server(keys) as server:
            verdict, _ = await attempt(server, keys / "authorized" / "node1.key_secret", b"hi")
            return verdict

    assert asyncio.run(scenario()) == zmq.EVENT_HANDSHAKE_SUCCEEDED


def test_server_socket_refuses_to_run_without_an_authenticator(keys: Path) -> None:
    """Without a ZAP handler libzmq admits every CURVE key; configuring such a socket is an error."""

    async def scenario() -> None:
        with_auth = zmq.asyncio.Context()
        other = zmq.asyncio.Context()
        try:
            with curve_authenticator(with_auth, keys / "authorized") as authenticator:
                socket = other.socket(zmq.ROUTER)
                try:
                    with pytest.raises(RuntimeError, match="running authenticator"):
                        curve_server(socket, keys / "coordinator" / "coordinator.key_secret", authenticator)
                finally:
                    socket.close(linger=0)
        finally:
            with_auth.term()
            other.term()

    asyncio.run(scenario())


def test_public_key_file_is_not_a_secret_key(keys: Path) -> None:
    socket = zmq.Context.instance().socket(zmq.DEALER)
    try:
        with pytest.raises(KeyFileError, match="no secret key"):
            curve_client(socket, keys / "authorized" / "node1.key", keys / "coordinator" / "coordinator.key")
    finally:
        socket.close(linger=0)


def test_a_refused_peer_retrying_is_logged_once_not_at_every_retry(
    keys: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """libzmq does not retry after a refusal, but a node started in a loop (or a scanner) does."""
    intruder = keys / "elsewhere" / "intruder.key_secret"

    async def scenario() -> list[int]:
        async with running_server(keys) as server:
            return [(await attempt(server, intruder, b"again"))[0] for _ in range(4)]

    with caplog.at_level("WARNING", logger="coordinator.nodes"):
        verdicts = asyncio.run(scenario())
    warnings = [
        r for r in caplog.records if r.name == "coordinator.nodes" and "refused node key" in r.message
    ]
    assert verdicts == [zmq.EVENT_HANDSHAKE_FAILED_AUTH] * 4
    assert len(warnings) == 1
    assert "not in" in warnings[0].message


def test_a_malformed_file_and_an_unreadable_directory_are_each_reported_once(
    keys: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The link asks the gate every half heartbeat: a standing problem must not fill the log."""
    authorized = keys / "authorized"
    (authorized / "broken.key").write_text("not a certificate\n")
    gate = AuthorizedKeys(authorized)
    missing = AuthorizedKeys(keys / "authorized" / "node1.key")  # a file, not a directory
    node1 = read_public_key(authorized / "node1.key")
    with caplog.at_level("WARNING", logger="coordinator.nodes"):
        for round in range(5):
            shutil.copy(authorized / "node2.key", authorized / f"copy{round}.key")  # the listing changes
            assert gate.allows(node1) is True
            assert missing.callback("*", node1) is False
    errors = [r.message for r in caplog.records if r.levelname == "ERROR"]
    assert len([m for m in errors if "broken.key" in m]) == 1
    assert len([m for m in errors if "cannot read authorized keys directory" in m]) == 1
    refusals = [r.message for r in caplog.records if "refused node key" in r.message]
    assert len(refusals) == 1  # the same key refused five times: said once


def _atomic_writer_swap(directory: Path, files: dict[str, str], generation: int) -> None:
    """What the kubelet does to a mounted Secret: a new ``..<ts>`` folder, ``..data`` swapped, links fixed."""
    fresh = directory / f"..gen{generation}"
    fresh.mkdir()
    for name, text in files.items():
        (fresh / name).write_text(text)
    (directory / "..data_tmp").symlink_to(fresh.name)
    (directory / "..data_tmp").rename(directory / "..data")
    for name in files:
        if not (directory / name).is_symlink():
            (directory / name).symlink_to(f"..data/{name}")
    for stale in directory.iterdir():
        if stale.is_symlink() and stale.name not in files and not stale.name.startswith(".."):
            stale.unlink()


def test_a_kubernetes_secret_update_revokes_without_restart(keys: Path) -> None:
    """Revoking in Kubernetes = removing the key from the mounted Secret; files there are symlinks."""
    mounted = keys / "mounted"
    mounted.mkdir()
    both = {
        name: (keys / "authorized" / name).read_text() for name in ("node1.key", "node2.key")
    }  # fmt: skip
    _atomic_writer_swap(mounted, both, 1)
    gate = AuthorizedKeys(mounted)
    node1, node2 = (read_public_key(keys / "authorized" / f"node{i}.key") for i in (1, 2))
    assert (gate.callback("*", node1), gate.callback("*", node2)) == (True, True)
    _atomic_writer_swap(mounted, {"node2.key": both["node2.key"]}, 2)
    assert (gate.callback("*", node1), gate.callback("*", node2)) == (False, True)


def test_the_gate_refuses_rather_than_raises_when_the_directory_is_unreadable(keys: Path) -> None:
    gate = AuthorizedKeys(keys / "authorized" / "node1.key")  # a file, not a directory
    assert gate.callback("*", read_public_key(keys / "authorized" / "node1.key")) is False
