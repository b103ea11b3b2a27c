"""A new request's answer future (``Journal.unary_outcome``) and the host's argument-type check.

The answer is what the pool replies from: cancelling it (the attempt ended) must leave the request
running and recorded for a re-run; the request's own end (the call ended) must end the answer too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from coordinator.egress import Egress, EgressPolicy, EnvResolver
from coordinator.errors import HostCallError
from coordinator.providers.host import ProviderHost
from coordinator.providers.journal import Journal

URL = "http://api.example/v1"


class Requests:
    """``perform`` for the journal: counts what was really sent; each answer waits for ``release``."""

    def __init__(self) -> None:
        self.sent = 0
        self.release = asyncio.Event()

    def performer(self, outcome: Any) -> Callable[[Callable[[], None]], Any]:
        async def perform(mark_sent: Callable[[], None]) -> Any:
            self.sent += 1
            mark_sent()
            await self.release.wait()
            if isinstance(outcome, Exception):
                raise outcome
            return outcome

        return perform


def test_an_abandoned_answer_leaves_the_request_running_for_the_rerun() -> None:
    async def scenario() -> None:
        async with asyncio.TaskGroup() as tasks:  # the pool's, in a pool
            journal, requests = Journal(limit=1 << 20), Requests()
            journal.begin_attempt(tasks.create_task)
            first = journal.unary_outcome("http_get", [URL], requests.performer("body"))
            await asyncio.sleep(0)
            first.cancel()  # the worker died: its attempt ends
            journal.begin_attempt(tasks.create_task)
            again = journal.unary_outcome("http_get", [URL], requests.performer("other"))
            requests.release.set()
            assert await again == "body"  # served the first request's answer, not sent twice
            assert requests.sent == 1 and not journal.sent
            journal.close()

    asyncio.run(scenario())


def test_a_failed_request_reaches_the_answer_and_the_record() -> None:
    async def scenario() -> None:
        async with asyncio.TaskGroup() as tasks:  # a failed request fails no task of the group
            journal, requests = Journal(limit=1 << 20), Requests()
            journal.begin_attempt(tasks.create_task)
            failure = HostCallError({"kind": "api", "message": "HTTP 500: x"})
            answer = journal.unary_outcome("http_get", [URL], requests.performer(failure))
            requests.release.set()
            with pytest.raises(HostCallError) as info:
                await answer
            assert info.value is failure
            journal.begin_attempt(tasks.create_task)
            with pytest.raises(HostCallError):
                await journal.unary_outcome("http_get", [URL], requests.performer("never"))
            assert requests.sent == 1
            journal.close()

    asyncio.run(scenario())


def test_closing_the_journal_ends_an_answer_still_waiting() -> None:
    async def scenario() -> None:
        async with asyncio.TaskGroup() as tasks:
            journal, requests = Journal(limit=1 << 20), Requests()
            journal.begin_attempt(tasks.create_task)
            answer = journal.unary_outcome("http_get", [URL], requests.performer("body"))
            await asyncio.sleep(0)
            journal.close()  # the call ended
            with pytest.raises(asyncio.CancelledError):
                await answer
            assert answer.cancelled()

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([5], "Function not found: http_get (i64)"),
        ([True], "Function not found: http_get (bool)"),  # bool is an int subclass: told apart
        ([URL, "h"], "Function not found: http_get (string, string)"),
        ([None], "Function not found: http_get (())"),
    ],
)
def test_argument_types_are_checked_on_every_request(args: list[Any], message: str) -> None:
    """The verdict is remembered per argument types; a good call first must not let a bad one by."""

    async def scenario() -> None:
        policy = EgressPolicy.build("p", urls=(URL,))
        env = EnvResolver.build("p", configured=(), allow=(), tenant_mode=False)
        async with Egress() as egress, asyncio.TaskGroup() as tasks:
            host = ProviderHost(egress, policy, env, timeout=5.0)
            host.begin_attempt(tasks.create_task)
            ok = host.start_call("http_get", [URL, {}])  # a good signature, remembered
            ok.cancel()
            for _ in range(2):
                with pytest.raises(HostCallError) as info:
                    await host.start_call("http_get", list(args))
                assert info.value.value == message
            host.close()

    asyncio.run(scenario())
