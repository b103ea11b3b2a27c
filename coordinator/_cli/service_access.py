"""How the commands that talk to a running ``rhaipool serve`` find it, sign in and report its refusals.

The service is ``--server URL``, else the ``[serve] listen`` address of ``--config FILE`` (the file the
service runs with), else ``$RHAIPOOL_SERVER``, else :data:`DEFAULT_SERVER`. Tokens come only from the
environment (``$RHAIPOOL_TOKEN``; admin commands read ``$RHAIPOOL_ADMIN_TOKEN`` first), never from the
command line, where ``ps`` would show them. A refusal exits 1, except a 400 (the request itself was
bad: a malformed name, a wrong kind), which is bad input and exits 2.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, TypeVar

import click

from coordinator._cli.output import EXIT_FAILED, EXIT_USAGE, emit_error, fail
from coordinator.client import Client, ServiceError, token_from_env

__all__ = ["DEFAULT_SERVER", "listen_url", "open_client", "report_refusal", "service_options", "target_url"]

DEFAULT_SERVER: Final = "http://127.0.0.1:8765"
_DEFAULT_LISTEN: Final = "127.0.0.1:8765"
_ANY_ADDRESS: Final = {"0.0.0.0": "127.0.0.1", "::": "::1", "[::]": "::1", "": "127.0.0.1"}

F = TypeVar("F", bound=Callable[..., Any])


def service_options(command: F) -> F:
    """``--server``, ``--config`` and ``--json``, the same on every command that talks to the service."""
    command = click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")(command)
    command = click.option(
        "--config",
        "config_path",
        type=click.Path(path_type=Path),
        default=None,
        help="The service's config file: talk to its [serve] listen address.",
    )(command)
    return click.option(
        "--server",
        default=None,
        metavar="URL",
        help=f"Service URL (default: the listen address of --config, else $RHAIPOOL_SERVER, "
        f"else {DEFAULT_SERVER}).",
    )(command)


def listen_url(config_path: Path) -> str:
    """The URL a client on this machine reaches the service of ``config_path`` at.

    Reads only ``[serve] listen`` and ``tls_cert`` (the rest of the file, node key files included, may
    not be on the machine the command runs on). A wildcard address is reached over loopback.
    Raises :class:`ValueError` with one line.
    """
    try:
        data = tomllib.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(
            f"cannot read config {config_path}: {getattr(exc, 'strerror', None) or exc}"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{config_path}: not valid TOML: {exc}") from None
    serve = data.get("serve", {})
    if not isinstance(serve, dict):
        raise ValueError(f"{config_path}: [serve] must be a table")
    listen = serve.get("listen", _DEFAULT_LISTEN)
    host, sep, port = listen.rpartition(":") if isinstance(listen, str) else ("", "", "")
    if not sep or not port.isdigit():
        raise ValueError(f'{config_path}: [serve] listen must be "HOST:PORT", got {listen!r}')
    host = _ANY_ADDRESS.get(host, host).strip("[]")
    scheme = "https" if serve.get("tls_cert") else "http"
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


def target_url(server: str | None, config_path: Path | None, as_json: bool) -> str:
    """The service URL the options name (exits 2 on a conflict or an unreadable config)."""
    if server and config_path:
        fail("give --server or --config, not both", as_json, EXIT_USAGE, "UsageError")
    if config_path is not None:
        try:
            return listen_url(config_path)
        except ValueError as exc:
            fail(str(exc), as_json, EXIT_USAGE, "InputError")
    return server or os.environ.get("RHAIPOOL_SERVER") or DEFAULT_SERVER


def open_client(server: str | None, config_path: Path | None, as_json: bool, *, admin: bool) -> Client:
    """A client of the service the options name, signed in with the environment's token."""
    return Client(target_url(server, config_path, as_json), token_from_env(admin=admin))


def report_refusal(exc: ServiceError, as_json: bool) -> int:
    """Print what the service answered (or why it could not be reached); the exit code."""
    code = EXIT_USAGE if exc.status == 400 else EXIT_FAILED
    extra = {"status": exc.status or None, "retry_after": exc.retry_after}
    cls = exc.error.get("class") if isinstance(exc.error, dict) else None
    return emit_error(exc.message, as_json, code, cls if isinstance(cls, str) else "ServiceError", **extra)
