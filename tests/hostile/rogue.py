"""Protocol attackers for the hostile corpus: a rogue peer on the pool's socket, and a taken-over worker.

``TakenOver`` speaks for one worker slot of a real pool, as a script that replaced its worker's code
would: the process the supervisor started is SIGSTOPped before it connects, and the test's DEALER
connects with its routing id (the technique of ``tests/integration/test_lying_worker.py``).  It
answers other tenants' calls honestly, the way a patient attacker would, and lies about its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable
from typing import Any

import zmq

from coordinator._core.pool import Pool
from proto import Call, Heartbeat, Ready, Result, WireMessage, decode, encode

Lie = Callable[["TakenOver", Call], None]


class TakenOver:
    """One worker slot of ``pool`` answered by the test; ``lie`` handles the attacker's calls."""

    def __init__(self, pool: Pool, attacker: str, lie: Lie) -> None:
        self.slot = next(iter(pool._supervisor.workers.values()))
        os.kill(self.slot.pid, signal.SIGSTOP)  # before it connects: its routing id is ours
        self.attacker, self.lie = attacker, lie
        self.context = zmq.Context()
        self.sock = self.context.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.ROUTING_ID, self.slot.identity)
        self.sock.connect(pool.endpoint)
        self.answered_honestly = 0
        self.lied = 0
        self.send(Ready(self.slot.pid, [1], 4, {"taken-over": {"active": True, "detail": "test"}}))

    def send(self, message: WireMessage | list[bytes]) -> None:
        self.sock.send_multipart(message if isinstance(message, list) else encode(message))

    async def serve(self) -> None:
        """Heartbeat, answer honestly, lie for the attacker; until cancelled."""
        while True:
            while self.sock.poll(0):
                message = decode(self.sock.recv_multipart())
                if isinstance(message, Call):
                    self._answer(message)
            self.send(Heartbeat({}))
            await asyncio.sleep(0.002)

    def _answer(self, call: Call) -> None:
        if call.tenant == self.attacker and call.op != "load":
            self.lied += 1
            self.lie(self, call)
        elif call.op == "load":
            functions = [["render", 1]] if call.kind == "region" else [["go", 0], ["initialize", 1]]
            self.send(Result(call.id, {"functions": functions}))
        else:
            self.answered_honestly += 1
            self.send(Result(call.id, honest_value(call)))

    def close(self) -> None:
        self.sock.close()
        self.context.term()
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.slot.pid, signal.SIGKILL)


def honest_value(call: Call) -> Any:
    """What the quiet tenant's script (``ctx.x * 2``) returns."""
    return call.args[0]["x"] * 2
