"""msgpack value encoding: the only place msgpack is called and its exceptions caught.

Allowed values are nil, bool, int (signed or unsigned 64-bit; a wider one is sent as the
nearest float, as a script would read it), float, str, bin (Python ``bytes``), arrays and
maps whose keys are strings.  Extension types
(including msgpack timestamps) are refused.  Every length is capped so that a
hostile peer cannot make the receiver allocate without bound.  ``pack`` refuses
everything ``unpack`` would: a message its peer drops is a call nobody answers.

msgpack nests at most ~1024 levels (its packer's recursion limit, its unpacker's
fixed stack), but scripts build values as deep as their budgets allow.  A body
nesting deeper travels *flattened*: one extension value of type ``DEEP_EXT``
holding a flat msgpack array of the value's nodes in pre-order, each container
replaced by a header ``[0, n]`` (array of n) or ``[1, n]`` (map of n, then n
key/value pairs).  Both sides walk it with an explicit stack: no recursion, and
the decoder checks every count against the caps and the bytes left.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Final

import msgpack

from proto.errors import MalformedMessage, TooLarge

__all__ = [
    "DEEP_EXT",
    "MAX_BODY_BYTES",
    "MAX_CONTAINER_LEN",
    "MAX_PLAIN_DEPTH",
    "copy_nested",
    "pack",
    "unpack",
]

MAX_BODY_BYTES: Final = 16 * 1024 * 1024
"""Hard cap on one encoded body; zmq's MAXMSGSIZE is set to a little more."""

MAX_CONTAINER_LEN: Final = 1_000_000
"""Hard cap on the element count of one array or map."""

DEEP_EXT: Final = 1
"""The one extension type on the wire: a whole body, flattened (see the module docstring)."""

_EXT_HEADERS: Final = frozenset({0xC7, 0xC8, 0xC9, 0xD4, 0xD5, 0xD6, 0xD7, 0xD8})
"""First bytes of msgpack's ext formats: a body that starts with one may be a flattened value."""

MAX_PLAIN_DEPTH: Final = 1000
"""Deepest container nesting sent as plain msgpack (the body itself is level 1); its unpacker
refuses 1025 levels.  Deeper bodies travel flattened."""
_MSGPACK_DEPTH: Final = MAX_PLAIN_DEPTH

_INT_MIN: Final = -(2**63)
_UINT_MAX: Final = 2**64 - 1
"""The ints msgpack carries (signed and unsigned 64-bit); wider ones travel as floats."""

_ARRAY, _MAP = 0, 1
"""Container headers in a flattened body."""

_CONTAINERS: Final = (dict, list, tuple)
"""What msgpack packs as an array or a map (subclasses included: ``strict_types=False``)."""

_STR_ONLY: Final = frozenset({str})
_SCALARS: Final = frozenset({str, int, float, bool, bytes, type(None)})
"""Exact types that are never containers (a subclass of one still goes through ``isinstance``)."""

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
    if _STR_ONLY.issuperset(map(type, obj)):  # one C-level pass (str subclasses never come off the wire)
        return obj
    for key in obj:
        if type(key) is not str:
            raise MalformedMessage(f"map key of type {type(key).__name__}; keys must be strings")
    return obj


def _no_ext(code: int, data: bytes) -> object:
    raise MalformedMessage(f"msgpack extension type {code} is not allowed")


def _check_packable(value: object) -> int:
    """Refuse what msgpack packs but ``unpack`` refuses: non-string map keys, containers over the cap.

    Without this the peer drops the whole message, and its call ends only by a deadline.  Iterative
    (no recursion limit); a long list of scalars is skipped by one C-level pass over its types.
    Returns how deep containers nest (1 for a flat one).
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    pop, push = stack.pop, stack.append
    deepest = 1
    while stack:
        node, depth = pop()
        if depth > deepest:
            deepest = depth
        if len(node) > MAX_CONTAINER_LEN:
            raise TooLarge(f"{type(node).__name__} of {len(node)} elements exceeds {MAX_CONTAINER_LEN}")
        if isinstance(node, dict):
            if not _STR_ONLY.issuperset(map(type, node)):
                for key in node:
                    if not isinstance(key, str):
                        raise MalformedMessage(f"map key of type {type(key).__name__}; keys must be strings")
            items = node.values()
        else:
            items = node
        if not _SCALARS.issuperset(map(type, items)):  # one C-level pass: most values hold no container
            for item in items:
                if isinstance(item, _CONTAINERS):
                    push((item, depth + 1))
    return deepest


def _flatten(value: object) -> list[Any]:
    """Pre-order nodes of ``value``, containers replaced by headers (iterative: any depth)."""
    flat: list[Any] = []
    stack: list[Any] = [value]
    pop, push, emit = stack.pop, stack.append, flat.append
    while stack:
        node = pop()
        if isinstance(node, dict):
            emit([_MAP, len(node)])
            for key, item in reversed(node.items()):
                push(item)
                push(key)
        elif isinstance(node, (list, tuple)):
            emit([_ARRAY, len(node)])
            push_all = stack.extend
            push_all(reversed(node))
        else:
            emit(node)
    return flat


def _pack_flat(value: object) -> bytes:
    """A body too deep for msgpack, as one ``DEEP_EXT`` value."""
    nodes = msgpack.packb(_flatten(value), use_bin_type=True, strict_types=False, datetime=False)
    return msgpack.packb(msgpack.ExtType(DEEP_EXT, nodes))  # type: ignore[no-any-return]


def _wide_int_as_float(value: object) -> object:
    if isinstance(value, int) and not isinstance(value, bool) and not _INT_MIN <= value <= _UINT_MAX:
        return float(value)  # OverflowError past the float range: that int has no wire form
    return value


def _wide_ints_as_floats(value: object) -> object:
    """``value`` with its ints beyond 64 bits as the nearest floats, what a script reads them as
    (docs/scripts/host-functions.md#values-between-json-and-rhai: the reference parses such a number as a
    float). Only reached when msgpack refused an int, so ordinary bodies are never copied."""
    return copy_nested(value, _wide_int_as_float, _same_key)


def _same_key(key: Any) -> Any:
    return key


_PACKER_KEEP_BYTES: Final = 64 * 1024
"""A thread keeps its packer while what it packs fits here; a bigger body's grown buffer is let go."""

_packers = threading.local()


def _pack_plain(value: object) -> bytes:
    """``msgpack.packb`` with one reused ``Packer`` per thread: ``packb`` builds (and allocates the
    buffer of) a new one for every message.  Per thread, since the worker packs from several."""
    packer = getattr(_packers, "packer", None)
    if packer is None:
        packer = _packers.packer = msgpack.Packer(
            use_bin_type=True, strict_types=False, datetime=False, buf_size=_PACKER_KEEP_BYTES
        )
    data: bytes = packer.pack(value)  # autoreset: the buffer is emptied, after an error too
    if len(data) > _PACKER_KEEP_BYTES:
        _packers.packer = None
    return data


def _encode(value: object, depth: int) -> bytes:
    if depth > _MSGPACK_DEPTH:
        return _pack_flat(value)
    return _pack_plain(value)


def pack(value: object, *, flat: bool = False) -> bytes:
    """Encode ``value``; raise ``ProtocolError`` for what the wire cannot carry or ``unpack`` would refuse.

    An int beyond 64 bits (msgpack's OverflowError) travels as the nearest float.  ``flat``: the caller
    knows ``value`` is a map of string keys to scalars and lists of scalars within the caps (a CALL of
    scalar arguments), so nothing in it is left to refuse but its size, and the walk is skipped."""
    depth = 2 if flat else _check_packable(value) if isinstance(value, _CONTAINERS) else 0
    try:
        try:
            data = _encode(value, depth)
        except OverflowError:
            data = _encode(_wide_ints_as_floats(value), depth)
    except (TypeError, ValueError, OverflowError, msgpack.PackException) as exc:
        raise MalformedMessage(f"value cannot be encoded: {exc}") from exc
    if len(data) > MAX_BODY_BYTES:
        raise TooLarge(f"encoded body of {len(data)} bytes exceeds {MAX_BODY_BYTES}")
    return data


def _flat_ext(code: int, data: bytes) -> object:
    if code != DEEP_EXT:
        raise MalformedMessage(f"msgpack extension type {code} is not allowed")
    return msgpack.ExtType(code, data)


_MISSING: Final = object()


def _node(node: Any) -> tuple[Any, int]:
    """A flattened node: (new container, children it expects) for a header, (scalar, -1) otherwise."""
    if isinstance(node, list):
        if len(node) != 2 or node[0] not in (_ARRAY, _MAP) or type(node[1]) is not int:
            raise MalformedMessage("bad container header in flattened value")
        if node[1] < 0:
            raise MalformedMessage("negative element count in flattened value")
        if node[1] > MAX_CONTAINER_LEN:
            raise TooLarge(f"container of {node[1]} elements exceeds {MAX_CONTAINER_LEN}")
        return ({} if node[0] == _MAP else []), node[1]
    return node, -1


def _rebuild(nodes: list[Any]) -> Any:
    """The value a flattened body stands for; every header is checked (iterative: any depth)."""
    open_: list[list[Any]] = []  # [container, children still expected, key awaiting its value]
    root: Any = _MISSING
    for node in nodes:
        if not open_ and root is not _MISSING:
            raise MalformedMessage("flattened value has nodes after its end")
        top = open_[-1] if open_ else None
        if top is not None and type(top[0]) is dict and top[2] is None:
            if type(node) is not str:
                raise MalformedMessage(f"map key of type {type(node).__name__}; keys must be strings")
            top[2] = node
            continue
        value, children = _node(node)
        if top is None:
            root = value
        elif type(top[0]) is dict:
            top[0][top[2]] = value
            top[2] = None
            top[1] -= 1
        else:
            top[0].append(value)
            top[1] -= 1
        if children > 0:
            open_.append([value, children, None])
        while open_ and open_[-1][1] == 0:
            open_.pop()
    if root is _MISSING or open_:
        raise MalformedMessage("flattened value ends inside a container")
    return root


def _unpack_flat(data: bytes | memoryview) -> Any:
    ext = msgpack.unpackb(data, ext_hook=_flat_ext, **{**_UNPACK_OPTIONS, "max_ext_len": MAX_BODY_BYTES})
    if not isinstance(ext, msgpack.ExtType):
        raise MalformedMessage("extension types are allowed only as a whole flattened body")
    nodes = msgpack.unpackb(
        ext.data, ext_hook=_no_ext, **{**_UNPACK_OPTIONS, "max_array_len": MAX_BODY_BYTES, "max_map_len": 0}
    )
    if not isinstance(nodes, list):
        raise MalformedMessage("flattened value is not an array of nodes")
    return _rebuild(nodes)


_unpackb: Final = msgpack.unpackb


def unpack(data: bytes | memoryview) -> Any:
    """Decode one complete msgpack value; any defect becomes a ``ProtocolError``."""
    if len(data) > MAX_BODY_BYTES:
        raise TooLarge(f"body of {len(data)} bytes exceeds {MAX_BODY_BYTES}")
    try:
        if len(data) and data[0] in _EXT_HEADERS:
            return _unpack_flat(data)
        # ``_UNPACK_OPTIONS`` spelt out: a literal keyword call builds and spreads no dict per message
        # (tests/proto/test_values_options.py holds the two to the same outcomes)
        return _unpackb(
            data, object_hook=_string_keys, ext_hook=_no_ext, raw=False, strict_map_key=True, use_list=True,
            max_str_len=MAX_BODY_BYTES, max_bin_len=MAX_BODY_BYTES, max_array_len=MAX_CONTAINER_LEN,
            max_map_len=MAX_CONTAINER_LEN, max_ext_len=0,
        )  # fmt: skip
    except MalformedMessage:
        raise
    except (ValueError, TypeError, OverflowError, RecursionError, msgpack.UnpackException) as exc:
        # ValueError covers ExtraData, FormatError, StackError, size caps and bad UTF-8.
        if "max_ext_len" in str(exc):
            raise MalformedMessage("msgpack extension types are not allowed") from exc
        if "exceeds max_" in str(exc):
            raise TooLarge(f"msgpack value too large: {exc}") from exc
        raise MalformedMessage(f"invalid msgpack: {exc}") from exc


def copy_nested(
    value: Any,
    leaf: Callable[[Any], Any],
    key: Callable[[Any], str],
    *,
    sort_keys: bool = False,
    maps: type | tuple[type, ...] = dict,
) -> Any:
    """``value`` with its lists/tuples copied as lists and its ``maps`` as dicts, ``leaf`` applied to
    everything else and ``key`` to every map key.  Iterative: values as deep as a script can build
    (far past Python's recursion limit) convert; errors are whatever ``leaf`` and ``key`` raise."""
    if not isinstance(value, (list, tuple, maps)):
        return leaf(value)
    root: Any = {} if isinstance(value, maps) else []
    stack: list[tuple[Any, Any]] = [(value, root)]
    while stack:
        src, dst = stack.pop()
        pairs = (
            ((key(k), src[k]) for k in (sorted(src) if sort_keys else src)) if isinstance(dst, dict) else None
        )
        for slot, item in pairs if pairs is not None else enumerate(src):
            child: Any
            if isinstance(item, (list, tuple)):
                child = []
                stack.append((item, child))
            elif isinstance(item, maps):
                child = {}
                stack.append((item, child))
            else:
                child = leaf(item)
            if pairs is None:
                dst.append(child)
            else:
                dst[slot] = child
    return root
