"""Typed field readers for message bodies: each returns the field or raises ``MalformedMessage``.

A body is a msgpack map with string keys.  Readers check presence and exact type
(``bool`` is not accepted where an ``int`` is expected) so that a message that
decodes is a message whose fields can be used without further checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from proto.errors import MalformedMessage

__all__ = [
    "MAX_ID",
    "any_value",
    "as_body",
    "opt_dict",
    "opt_float",
    "opt_int",
    "opt_str",
    "req_bool",
    "req_dict",
    "req_float",
    "req_id",
    "req_int",
    "req_list",
    "req_str",
]

MAX_ID: Final = 2**63 - 1
"""Call and host-call ids are non-negative signed 64-bit integers."""

_MISSING: Final = object()


def as_body(value: object) -> Mapping[str, Any]:
    """The decoded body must be a map (keys were checked to be strings by ``proto.values``)."""
    if not isinstance(value, dict):
        raise MalformedMessage(f"body is {type(value).__name__}, expected a map")
    return value


def _get(body: Mapping[str, Any], key: str) -> Any:
    value = body.get(key, _MISSING)
    if value is _MISSING:
        raise MalformedMessage(f"missing field {key!r}")
    return value


def _wrong(key: str, value: object, expected: str) -> MalformedMessage:
    return MalformedMessage(f"field {key!r} is {type(value).__name__}, expected {expected}")


def req_int(body: Mapping[str, Any], key: str) -> int:
    value = _get(body, key)
    if type(value) is not int:
        raise _wrong(key, value, "int")
    return value


def req_id(body: Mapping[str, Any], key: str = "id") -> int:
    value = req_int(body, key)
    if not 0 <= value <= MAX_ID:
        raise MalformedMessage(f"field {key!r} = {value} is outside 0..2**63-1")
    return value


def opt_int(body: Mapping[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is not None and type(value) is not int:
        raise _wrong(key, value, "int or nil")
    return value


def req_float(body: Mapping[str, Any], key: str) -> float:
    value = _get(body, key)
    if type(value) is int:
        return float(value)
    if type(value) is not float:
        raise _wrong(key, value, "float")
    return value


def opt_float(body: Mapping[str, Any], key: str) -> float | None:
    if body.get(key) is None:
        return None
    return req_float(body, key)


def req_str(body: Mapping[str, Any], key: str) -> str:
    value = _get(body, key)
    if type(value) is not str:
        raise _wrong(key, value, "str")
    return value


def opt_str(body: Mapping[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is not None and type(value) is not str:
        raise _wrong(key, value, "str or nil")
    return value


def req_bool(body: Mapping[str, Any], key: str) -> bool:
    value = _get(body, key)
    if type(value) is not bool:
        raise _wrong(key, value, "bool")
    return value


def req_list(body: Mapping[str, Any], key: str) -> list[Any]:
    value = _get(body, key)
    if type(value) is not list:
        raise _wrong(key, value, "array")
    return value


def req_dict(body: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = _get(body, key)
    if type(value) is not dict:
        raise _wrong(key, value, "map")
    return value


def opt_dict(body: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    value = body.get(key)
    if value is not None and type(value) is not dict:
        raise _wrong(key, value, "map or nil")
    return value


def any_value(body: Mapping[str, Any], key: str) -> Any:
    """A script value: present, any msgpack type (nil allowed)."""
    return _get(body, key)
