"""The words both sides of the wire share: script kinds, CALL ops, ERROR classes, limits.

Each is a ``StrEnum``: a member *is* its string (``Op.CALL == "call"``, same hash, and msgpack packs
it as the same bytes), so a module that still compares bare strings keeps working while every new
comparison names a member and a typo fails at import time instead of never matching.

"""

from __future__ import annotations

import enum

__all__ = ["ErrorClass", "Kind", "Limit", "Op", "rhai_type_name"]


class Kind(enum.StrEnum):
    """What a script is: it decides the engine budget, the helper set and the brokered functions."""

    REGION = "region"
    PROVIDER = "provider"


class Op(enum.StrEnum):
    """What a CALL asks: compile and describe, run one function, or run one function as a stream."""

    LOAD = "load"
    CALL = "call"
    STREAM = "stream"


class ErrorClass(enum.StrEnum):
    """The ``cls`` field of a wire ERROR: why a CALL ended without a value."""

    COMPILE_ERROR = "CompileError"
    """load: the source does not compile (line, column set)."""
    SCRIPT_ERROR = "ScriptError"
    """A runtime error or throw (value set for a throw)."""
    LIMIT_EXCEEDED = "LimitExceeded"
    """Operations, data size or call depth ran out (limit set)."""
    SCRIPT_TIMEOUT = "ScriptTimeout"
    """The in-engine wall-clock deadline passed."""
    CANCELLED = "Cancelled"
    """The call was cancelled by CANCEL or SHUTDOWN."""
    SCRIPT_MISSING = "ScriptMissing"
    """A CALL without source for a script this worker does not hold."""
    RESIDENT_MISSING = "ResidentMissing"
    """A CALL with a resident delta whose base this worker does not hold."""
    INVALID_VALUE = "InvalidValue"
    """An argument or the return value has no wire form."""
    INTERNAL = "Internal"
    """A bug in the worker; the coordinator treats it as a crash."""


class Limit(enum.StrEnum):
    """Which budget ran out (the ``limit`` of a wire ERROR and of ``LimitExceeded``)."""

    OPERATIONS = "operations"
    DATA_SIZE = "data_size"
    CALL_DEPTH = "call_depth"
    DEADLINE = "deadline"
    MEMORY = "memory"
    CPU = "cpu"
    OTHER = "limit"
    """A Rhai limit this version does not name (a newer binding's)."""


def rhai_type_name(value: object) -> str:
    """Rhai's ``type_of`` name of a wire value (``()``, ``bool``, ``i64``, ``f64``, ``string``, ``blob``,
    ``array``, ``map``); anything else by its Python class name.

    The worker's typed helpers and the coordinator's host-call checks both say "function not found:
    name (types)" in these words, so a script sees the same message whichever side refused it.
    """
    if value is None:
        return "()"
    if isinstance(value, bool):  # before int: bool is an int subclass
        return "bool"
    if isinstance(value, int):
        return "i64"
    if isinstance(value, float):
        return "f64"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bytes | bytearray):
        return "blob"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "map"
    return type(value).__name__
