"""What a provider command shows while it runs: each retry with its delay and why, a rate-limit countdown.

The facts of the last failed HTTP request (status, failure_kind label, the server's text) come from the
provider host's log records, which carry the egress error; nothing in the library knows about a terminal.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from coordinator._cli.output import verbosity
from coordinator._cli.provider_present import FailureFacts, facts_from_host_error, provider_error_fields
from coordinator.providers.errors import ProviderError
from coordinator.providers.runtime import ProviderRuntime

__all__ = ["Watch", "watching"]

_HOST_LOGGER = "coordinator.providers.host"


class Watch(logging.Handler):
    """Collects host failures and prints retries; one per command run."""

    def __init__(self, host: str | None, attempts: int) -> None:
        super().__init__(logging.INFO)
        self.host = host
        self.max_attempts = attempts
        self.facts = FailureFacts()
        self._countdown: asyncio.Task[None] | None = None
        self.script: Path | None = None
        """The provider's script file, to name in places (the pool knows it by provider name)."""

    def emit(self, record: logging.LogRecord) -> None:
        """A host request failed: keep what egress worked out about it."""
        err = record.args[-1] if isinstance(record.args, tuple) and record.args else None
        value = getattr(err, "value", None)
        if isinstance(value, dict):
            attempts, retries = self.facts.attempts, self.facts.retries
            self.facts = facts_from_host_error(
                value, getattr(err, "failure_kind", None), getattr(err, "server_text", None)
            )
            self.facts.attempts, self.facts.retries = attempts, retries

    def on_retry(self, err: ProviderError, delay: float) -> None:
        """One stderr line per retry; a countdown on a terminal while a rate limit is waited out."""
        fields = provider_error_fields(err, self.facts, self.host)
        why = fields.get("failure_kind") or fields["class"]
        detail = f"HTTP {fields['status']}" if fields.get("status") else fields["message"]
        line = (
            f"attempt {self.facts.attempts}/{self.max_attempts} failed ({why}: {detail}); "
            f"retrying in {delay:.1f} s"
        )
        self.facts.retries.append(line)
        self.facts.attempts += 1
        if verbosity() < 0:
            return
        click.echo(click.style(line, fg="yellow"), err=True)
        if err.capacity and delay >= 2 and sys.stderr.isatty():
            self._countdown = asyncio.get_running_loop().create_task(_count_down(delay))


async def _count_down(delay: float) -> None:
    left = int(delay)
    while left > 0:
        click.echo(f"\r  waiting on the rate limit: {left:>3} s ", err=True, nl=False)
        await asyncio.sleep(1)
        left -= 1
    click.echo("\r" + " " * 40 + "\r", err=True, nl=False)


@contextmanager
def watching(runtime: ProviderRuntime, name: str) -> Iterator[Watch]:
    """Attach a :class:`Watch` to ``runtime`` and to the host's log for the block."""
    table = runtime.config.table(name)
    host = _host_of(table.base_url if table else None)
    watch = Watch(host, runtime.config.retry_attempts)
    logger = logging.getLogger(_HOST_LOGGER)
    level = logger.level
    logger.addHandler(watch)
    logger.setLevel(logging.INFO)
    runtime.on_retry = watch.on_retry
    try:
        yield watch
    finally:
        runtime.on_retry = None
        logger.removeHandler(watch)
        logger.setLevel(level)


def _host_of(url: Any) -> str | None:
    if not isinstance(url, str):
        return None
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return parts.netloc or None
