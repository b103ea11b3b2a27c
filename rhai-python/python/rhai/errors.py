"""The exceptions of rhai-python, one tree::

    RhaiError                      .message .line .column .script .kind .frames
    ├── CompileError               the source does not compile
    ├── ScriptError                a catchable runtime failure of the script
    │   ├── ScriptThrow            `throw value` (or a host `Throw`) not caught: .value
    │   └── FunctionNotFound       .signature
    ├── LimitExceeded              a resource limit (never catchable by the script)
    │   ├── TooManyOperations
    │   ├── DataTooLarge           .what
    │   ├── CallDepthExceeded
    │   └── DeadlineExceeded       also a builtin TimeoutError
    └── Cancelled                  CancelToken.cancel() stopped the call
    Throw                          raised *by host functions* to throw a value into the script

Exceptions a host function raises other than ``Throw`` are not caught by the
script and reach the caller of ``Script.call`` as the same object, with a note.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CallDepthExceeded",
    "Cancelled",
    "CompileError",
    "DataTooLarge",
    "DeadlineExceeded",
    "FunctionNotFound",
    "LimitExceeded",
    "RhaiError",
    "ScriptError",
    "ScriptThrow",
    "Throw",
    "TooManyOperations",
]

Frame = tuple[str, str, "int | None", "int | None"]


class RhaiError(Exception):
    """Base of every error the engine reports; carries where it happened."""

    def __init__(
        self,
        message: str,
        *,
        line: int | None = None,
        column: int | None = None,
        script: str | None = None,
        kind: str | None = None,
        frames: tuple[Frame, ...] = (),
        **extra: Any,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column
        self.script = script
        self.kind = kind
        self.frames = tuple(frames)
        for key, value in extra.items():
            setattr(self, key, value)

    def __str__(self) -> str:
        where = self.script or "<script>"
        if self.line:
            where += f":{self.line}"
            if self.column:
                where += f":{self.column}"
        return f"{self.message} ({where})"


class CompileError(RhaiError):
    """The script does not compile (syntax, disabled keyword, too deep, too big)."""


class ScriptError(RhaiError):
    """A runtime failure the script could have caught with try/catch."""


class ScriptThrow(ScriptError):
    """A thrown value nobody caught; ``.value`` is the value itself."""

    value: Any

    @property
    def transient(self) -> bool:
        """The thrown map's ``transient`` flag (False when absent)."""
        return isinstance(self.value, dict) and self.value.get("transient") is True

    @property
    def thrown_kind(self) -> str | None:
        """The thrown map's ``kind`` field, if any."""
        kind = self.value.get("kind") if isinstance(self.value, dict) else None
        return kind if isinstance(kind, str) else None


class FunctionNotFound(ScriptError):
    """The script called (or the host asked for) a function that does not exist."""

    signature: str


class LimitExceeded(RhaiError):
    """A resource limit stopped the script; scripts cannot catch these."""


class TooManyOperations(LimitExceeded):
    """The operation budget ran out."""


class DataTooLarge(LimitExceeded):
    """A string, array or map grew past its size limit."""

    what: str


class CallDepthExceeded(LimitExceeded):
    """Function calls nested deeper than the call-level limit."""


class DeadlineExceeded(LimitExceeded, TimeoutError):
    """The call ran past its ``timeout``."""


class Cancelled(RhaiError):
    """A ``CancelToken`` stopped the call."""


class Throw(Exception):
    """Raise from a host function to throw ``value`` into the script (catchable)."""

    def __init__(self, value: Any) -> None:
        super().__init__(value)
        self.value = value
