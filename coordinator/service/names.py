"""The one rule for the names a tenant gives its scripts, regions and providers.

A name is 1 to 64 of ``A-Z a-z 0-9 . _ -`` and is not ``.`` or ``..``: short enough for any file
system or log line, with nothing a path, a shell or a log parser reads specially. A script's (and so a
provider's) name may carry a ``.rhai`` suffix that means the same script. The rule is checked before
anything is stored, so no stored row can hold a name the service cannot load again.
"""

from __future__ import annotations

import re
from typing import Final, Literal

from coordinator.service.errors import InvalidName

__all__ = ["MAX_NAME_CHARS", "NAME_PATTERN", "InvalidName", "NameKind", "check_name", "shown"]

MAX_NAME_CHARS: Final = 64
NAME_PATTERN: Final = r"^[A-Za-z0-9._-]{1,64}$"
"""The rule as a regular expression (``.`` and ``..`` are refused on top of it)."""
_NAME: Final = re.compile(NAME_PATTERN)
_SHOWN_CHARS: Final = 80

NameKind = Literal["script", "region", "provider"]


def shown(text: str) -> str:
    """A tenant's text as a message may quote it between quotes: escaped (one printable line), cut."""
    cut = text[:_SHOWN_CHARS]
    escaped = cut.encode("unicode_escape").decode("ascii").replace("'", "\\'")
    return escaped + ("..." if len(text) > _SHOWN_CHARS else "")


def check_name(name: str, kind: NameKind = "script") -> str:
    """The name (a script's or provider's without ``.rhai``), or :class:`InvalidName` saying the rule."""
    stem = name.removesuffix(".rhai") if kind != "region" else name
    if stem in (".", "..") or not _NAME.fullmatch(stem):
        raise InvalidName(
            f"Invalid {kind} name '{shown(name)}': names are 1 to {MAX_NAME_CHARS} letters, digits, "
            "'.', '_' or '-', and not '.' or '..'"
        )
    return stem
