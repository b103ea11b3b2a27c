"""What every command shares: exit codes, the one ``--json`` error shape, ``-v``/``-q``, ``-h``.

Exit codes (the same for every command):

====  ==========================================================================================
0     the operation succeeded
1     the operation ran and failed (a script did not compile, a provider answered an error, a
      scenario expectation did not hold, the service could not be reached)
2     bad usage or input (unknown option, unreadable or malformed file, unknown provider name)
====  ==========================================================================================

With ``--json`` a failure prints exactly one document on stdout: ``{"error": {"class", "message", ...}}``.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Sequence
from typing import Any, Final, NoReturn

import click

__all__ = [
    "CONTEXT_SETTINGS",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "RhaipoolGroup",
    "add_verbosity",
    "emit_error",
    "error_doc",
    "fail",
    "verbosity",
]

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2

CONTEXT_SETTINGS: Final[dict[str, Any]] = {"help_option_names": ["-h", "--help"]}

_level = {"value": 0}


def verbosity() -> int:
    """-1 with ``-q``, 0 by default, 1 with ``-v``: how much the command tells about itself."""
    return _level["value"]


def _set_level(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if not value:
        return
    _level["value"] = 1 if param.name == "verbose" else -1
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger().setLevel(logging.INFO if _level["value"] > 0 else logging.ERROR)


def add_verbosity(command: click.Command) -> None:
    """Give ``command`` (and every sub-command of a group) ``-v/--verbose`` and ``-q/--quiet``."""
    names = {opt for p in command.params for opt in getattr(p, "opts", [])}
    if "-v" not in names and "--verbose" not in names:
        command.params.append(
            click.Option(
                ["-v", "--verbose"],
                is_flag=True,
                expose_value=False,
                is_eager=True,
                callback=_set_level,
                help="Say more: retries as they happen, script hashes, log lines.",
            )
        )
        command.params.append(
            click.Option(
                ["-q", "--quiet"],
                is_flag=True,
                expose_value=False,
                is_eager=True,
                callback=_set_level,
                help="Print only results and errors (no progress, retry or warning lines).",
            )
        )
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            add_verbosity(sub)


def error_doc(cls: str, message: str, **extra: Any) -> dict[str, Any]:
    """The one error shape: ``{"error": {"class", "message", ...extra}}`` (``None`` extras left out)."""
    body: dict[str, Any] = {"class": cls, "message": message}
    body.update({k: v for k, v in extra.items() if v is not None})
    return {"error": body}


def emit_error(message: str, as_json: bool, code: int = EXIT_FAILED, cls: str = "Error", **extra: Any) -> int:
    """Print one failure (JSON on stdout, else ``error: ...`` on stderr); returns ``code``."""
    if as_json:
        click.echo(json.dumps(error_doc(cls, message, **extra), ensure_ascii=False))
    else:
        click.echo(click.style(f"error: {message}", fg="red"), err=True)
    return code


def fail(message: str, as_json: bool, code: int = EXIT_FAILED, cls: str = "Error", **extra: Any) -> NoReturn:
    """:func:`emit_error`, then exit with ``code``."""
    sys.exit(emit_error(message, as_json, code, cls, **extra))


def _wants_json(args: Sequence[str]) -> bool:
    return "--json" in args


class RhaipoolGroup(click.Group):
    """A group whose usage errors follow the ``--json`` contract when ``--json`` was given."""

    def main(self, args: Sequence[str] | None = None, *a: Any, **kw: Any) -> Any:
        """Run the command; a usage error becomes ``{"error": {"class": "UsageError", ...}}`` under --json."""
        argv = list(sys.argv[1:] if args is None else args)
        if not _wants_json(argv):
            return super().main(argv, *a, **kw)
        try:
            return super().main(argv, *a, **{**kw, "standalone_mode": False})
        except click.UsageError as exc:
            fail(exc.format_message(), True, EXIT_USAGE, "UsageError")
        except click.ClickException as exc:
            fail(exc.format_message(), True, EXIT_FAILED, type(exc).__name__)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except click.Abort:
            fail("aborted", True, EXIT_FAILED, "Aborted")
