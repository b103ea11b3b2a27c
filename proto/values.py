"""msgpack value encoding: the only place msgpack is called and its exceptions caught.

Allowed values are nil, bool, int (signed or unsigned 64-bit), float, str, bin
(Python ``bytes``), arrays and maps whose keys are strings.  Extension types
(including msgpack timestamps) are refused.  Every length is capped so that a
hostile peer cannot make the receiver allocate without bound.  ``pack`` refuses
everything ``unpack`` would: a message its peer drops is a call nobody answers.
"""

from __future__ import annotations

from typing import Any, Final

import msgpack

from proto.errors import MalformedMessage, TooLarge

__all__ = ["MAX_BODY_BYTES", "MAX_CONTAINER_LEN", "pack", "unpack"]

MAX_BODY_BYTES: Final = 16 * 1024 * 1024
"""Hard cap on one encoded body; zmq's MAXMSGSIZE is set to a little more."""

MAX_CONTAINER_LEN: Final = 1_000_000
"""Hard cap on the element count of one array or map."""

_CONTAINERS: Final = (dict, list, tuple)
"""What msgpack packs as an array or a map (subclasses included: ``strict_types=False``)."""

_UNPACK_OPTIONS: Final[dict[str, Any]] = {
    "raw": False,
    "strict_map_key": True,
    "use_list": True,
    "max_str_len": MAX_BODY_BYTES,
    "max_bin_len": MAX_BODY_BYTES,
    "max_array_len": MAX_CONTAINER_LEN,
    "max_map_len": MAX_CONTAINER_LEN,
    "max_ext_len": 0,
}


def _string_keys(obj: dict[Any, Any]) -> dict[Any, Any]:
    """Reject maps with binary keys; msgpack's strict_map_key still admits bytes."""
    for key in obj:
        if type(key) is not str:
            raise MalformedMessage(f"map key of type {type(key).__name__}; keys must be strings")
    return obj


def _no_ext(code: int, data: bytes) -> object:
    raise MalformedMessage(f"msgpack extension type {code} is not allowed")


def _check_packable(value: object) -> None:
    """Refuse what msgpack packs but ``unpack`` refuses: non-string map keys, containers over the cap.

    Without this the peer drops the whole message, and its call ends only by a deadline.  Iterative
    (no recursion limit); a long list of scalars is skipped by one C-level pass over its types.
    """
    stack: list[Any] = [value]
    pop, push = stack.pop, stack.append
    while stack:
        node = pop()
        if len(node) > MAX_CONTAINER_LEN:
            raise TooLarge(f"{type(node).__name__} of {len(node)} elements exceeds {MAX_CONTAINER_LEN}")
        if isinstance(node, dict):
            for key, item in node.items():
                if not isinstance(key, str):
                    raise MalformedMessage(f"map key of type {type(key).__name__}; keys must be strings")
                if isinstance(item, _CONTAINERS):
                    push(item)
        elif len(node) <= 16 or any(issubclass(t, _CONTAINERS) for t in set(map(type, node))):
            for item in node:
                if isinstance(item, _CONTAINERS):
                    push(item)


def pack(value: object) -> bytes:
    """Encode ``value``; raise ``ProtocolError`` for what the wire cannot carry or ``unpack`` would refuse."""
    try:
        data = msgpack.packb(value, use_bin_type=True, strict_types=False, datetime=False)
    except (TypeError, ValueError, OverflowError, msgpack.PackException) as exc:
        raise MalformedMessage(f"value cannot be encoded: {exc}") from exc
    if len(data) > MAX_BODY_BYTES:
        raise TooLarge(f"encoded body of {len(data)} bytes exceeds {MAX_BODY_BYTES}")
    if isinstance(value, _CONTAINERS):
        _check_packable(value)
    return data  # type: ignore[no-any-return]


def unpack(data: bytes | memoryview) -> Any:
    """Decode one complete msgpack value; any defect becomes a ``ProtocolError``."""
    if len(data) > MAX_BODY_BYTES:
        raise TooLarge(f"body of {len(data)} bytes exceeds {MAX_BODY_BYTES}")
    try:
        return msgpack.unpackb(data, object_hook=_string_keys, ext_hook=_no_ext, **_UNPACK_OPTIONS)
    except MalformedMessage:
        raise
    except (ValueError, TypeError, OverflowError, RecursionError, msgpack.UnpackException) as exc:
        # ValueError covers ExtraData, FormatError, StackError, size caps and bad UTF-8.
        if "max_ext_len" in str(exc):
            raise MalformedMessage("msgpack extension types are not allowed") from exc
        if "exceeds max_" in str(exc):
            raise TooLarge(f"msgpack value too large: {exc}") from exc
        raise MalformedMessage(f"invalid msgpack: {exc}") from exc
