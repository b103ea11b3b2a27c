"""The helper functions a region hook can call (docs/scripts/regions.md#helpers-a-hook-can-call), with the
reference's exact semantics.

The reference registers these as typed Rust functions: a call with the wrong
argument types does not reach them ("function not found").  Python callables
are registered untyped, so each helper checks its own argument types and
raises ``TypeError`` naming the signature, which fails the hook the same way.

Region hooks get no ``parse_json``, ``to_json``, ``http_*``, ``env_var``,
base64 or filesystem helpers: none is defined here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from decimal import Decimal
from typing import Any, Final

from contract.text import RUST_WHITESPACE
from contract.tokens import quarter_bytes
from proto.vocabulary import rhai_type_name

__all__ = ["FUNCTIONS", "SIGNATURES", "rhai_to_string"]

_I64_MIN: Final = -(2**63)
_I64_MAX: Final = 2**63 - 1
_MERMAID_MARKERS: Final = (
    "graph",
    "sequenceDiagram",
    "classDiagram",
    "stateDiagram",
    "erDiagram",
    "flowchart",
)
_MODIFIED_MARKERS: Final = ("modified:", "changed:", "updated:", "M ")
_CONTENT_FORMATS: Final = ("text", "json", "mermaid", "markdown", "code")
_JSON_MAX_DEPTH: Final = 127
"""serde_json refuses the 128th nested array/object ("recursion limit exceeded")."""


_type_name = rhai_type_name


def _check(name: str, args: tuple[Any, ...], *types: str) -> None:
    """Refuse arguments the typed reference function would not match."""
    if tuple(_type_name(a) for a in args) != types:
        got = ", ".join(_type_name(a) for a in args)
        raise TypeError(f"Function not found: {name} ({got}); expected {name}({', '.join(types)})")


def _float_text(value: float) -> str:
    """Rhai's float display: ``1.0``, ``0.1``, and exponent form beyond 1e13 or below 1e-13."""
    if math.isnan(value):
        return "NaN"
    magnitude = abs(value)
    if magnitude == 0:
        return "0.0"
    if magnitude == float("inf"):
        return "inf" if value > 0 else "-inf"
    if magnitude > 1e13 or magnitude < 1e-13:
        sign, digits, exponent = Decimal(repr(value)).as_tuple()
        text = "".join(map(str, digits)).rstrip("0") or "0"
        power = int(exponent) + len(digits) - 1
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        return f"{'-' if sign else ''}{mantissa}e{power}"
    text = format(Decimal(repr(value)), "f")
    return text if "." in text else text + ".0"


def _debug_text(value: Any) -> str:
    if value is None:
        return "()"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return rhai_to_string(value)


def rhai_to_string(value: Any) -> str:
    """What Rhai's ``to_string`` gives for a value (``join`` formats items with it)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _float_text(value)
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray):
        return "[" + "".join(f"{b:02x}" for b in value) + "]"
    if isinstance(value, list):
        return "[" + ", ".join(_debug_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "#{" + ", ".join(f"{json.dumps(k)}: {_debug_text(v)}" for k, v in value.items()) + "}"
    return str(value)


def _rust_lines(text: str) -> list[str]:
    """Rust's ``str::lines``: split on ``\\n``, strip one trailing ``\\r``, no final empty line."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def _json_depth(value: Any, depth: int = 0) -> int:
    if isinstance(value, list):
        return max((_json_depth(v, depth + 1) for v in value), default=depth + 1)
    if isinstance(value, dict):
        return max((_json_depth(v, depth + 1) for v in value.values()), default=depth + 1)
    return depth


def _has_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return any("\ud800" <= ch <= "\udfff" for ch in value)
    if isinstance(value, list):
        return any(_has_surrogate(v) for v in value)
    if isinstance(value, dict):
        return any(_has_surrogate(k) or _has_surrogate(v) for k, v in value.items())
    return False


def _finite_float(text: str) -> float:
    number = float(text)
    if number in (float("inf"), float("-inf")):
        raise ValueError("number out of range")
    return number


def _no_constant(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")


# -- strings -----------------------------------------------------------------


def contains(*args: Any) -> bool:
    """``contains(text, pattern)``: substring test."""
    _check("contains", args, "string", "string")
    return bool(args[1] in args[0])


def starts_with(*args: Any) -> bool:
    """``starts_with(text, pattern)``."""
    _check("starts_with", args, "string", "string")
    return bool(args[0].startswith(args[1]))


def ends_with(*args: Any) -> bool:
    """``ends_with(text, pattern)``."""
    _check("ends_with", args, "string", "string")
    return bool(args[0].endswith(args[1]))


def trim(*args: Any) -> str:
    """``trim(text)``: a trimmed copy (Unicode White_Space), the argument untouched."""
    _check("trim", args, "string")
    return str(args[0]).strip(RUST_WHITESPACE)


def split(*args: Any) -> list[str]:
    """``split(text, separator)``: Rust ``str::split`` (an empty separator splits between chars)."""
    _check("split", args, "string", "string")
    text, separator = args
    if separator == "":
        return ["", *text, ""]
    return list(text.split(separator))


def join(*args: Any) -> str:
    """``join(array, separator)``: items formatted with ``to_string``."""
    _check("join", args, "array", "string")
    return str(args[1]).join(rhai_to_string(item) for item in args[0])


def count_tokens(*args: Any) -> int:
    """``count_tokens(text)`` = ``ceil(utf8_bytes / 4)``."""
    _check("count_tokens", args, "string")
    return quarter_bytes(args[0])


def is_json(*args: Any) -> bool:
    """``is_json(text)``: whether serde_json parses it (no NaN, no lone surrogate, depth < 128)."""
    _check("is_json", args, "string")
    try:
        value = json.loads(args[0], parse_float=_finite_float, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return False
    return _json_depth(value) <= _JSON_MAX_DEPTH and not _has_surrogate(value)


def is_mermaid(*args: Any) -> bool:
    """``is_mermaid(text)``: contains a Mermaid diagram keyword anywhere."""
    _check("is_mermaid", args, "string")
    return any(marker in args[0] for marker in _MERMAID_MARKERS)


def is_markdown(*args: Any) -> bool:
    """``is_markdown(text)``: true for any non-empty text (the reference is that permissive)."""
    _check("is_markdown", args, "string")
    return len(args[0]) > 0


def is_empty(*args: Any) -> bool:
    """``is_empty(text)``: whitespace-only counts as empty."""
    _check("is_empty", args, "string")
    return not args[0].strip(RUST_WHITESPACE)


def summarize(*args: Any) -> str:
    """``summarize(text, max_tokens)``: the reference's placeholder, a cut at ``4 * max_tokens`` bytes."""
    _check("summarize", args, "string", "i64")
    text, max_tokens = args
    target = (max_tokens * 4) % 2**64  # Rust's `as usize` of the wrapped i64 product
    data: bytes = str(text).encode("utf-8", "surrogatepass")
    if len(data) <= target:
        return str(text)
    try:
        return data[:target].decode("utf-8") + "..."
    except UnicodeDecodeError as exc:
        raise ValueError(f"summarize: byte index {target} is not a char boundary") from exc


def extract_modified(*args: Any) -> list[str]:
    """``extract_modified(content)``: lines starting with modified:/changed:/updated:/``M ``."""
    _check("extract_modified", args, "string")
    return [line for line in _rust_lines(args[0]) if line.startswith(_MODIFIED_MARKERS)]


# -- region constructors and budget helpers --------------------------------------


def region_pinned(*args: Any) -> str:
    """``region_pinned()`` -> ``"pinned"``."""
    _check("region_pinned", args)
    return "pinned"


def region_temporary(*args: Any) -> str:
    """``region_temporary()`` -> ``"temporary"``."""
    _check("region_temporary", args)
    return "temporary"


def region_clearable(*args: Any) -> str:
    """``region_clearable()`` -> ``"clearable"``."""
    _check("region_clearable", args)
    return "clearable"


def region_sliding_window(*args: Any) -> dict[str, Any]:
    """``region_sliding_window(n)`` -> ``#{kind: "sliding_window", max_items: n}``."""
    _check("region_sliding_window", args, "i64")
    return {"kind": "sliding_window", "max_items": args[0]}


def region_compacting(*args: Any) -> dict[str, Any]:
    """``region_compacting(t)`` -> ``#{kind: "compacting", threshold_tokens: t}``."""
    _check("region_compacting", args, "i64")
    return {"kind": "compacting", "threshold_tokens": args[0]}


def region_custom(*args: Any) -> dict[str, Any]:
    """``region_custom(script, persistent)`` -> ``#{kind: "custom", script, persistent}``."""
    _check("region_custom", args, "string", "bool")
    return {"kind": "custom", "script": args[0], "persistent": args[1]}


def region_entry(*args: Any) -> dict[str, Any]:
    """``region_entry(content, tokens)`` -> ``#{content, tokens}``."""
    _check("region_entry", args, "string", "i64")
    return {"content": args[0], "tokens": args[1]}


def content_format(*args: Any) -> str:
    """``content_format(fmt)``: one of text/json/mermaid/markdown/code, else ``"text"``."""
    _check("content_format", args, "string")
    return str(args[0]) if args[0] in _CONTENT_FORMATS else "text"


def tokens_remaining(*args: Any) -> int:
    """``tokens_remaining(max, current)``: saturating i64 subtraction."""
    _check("tokens_remaining", args, "i64", "i64")
    return int(min(_I64_MAX, max(_I64_MIN, args[0] - args[1])))


def usage_ratio(*args: Any) -> float:
    """``usage_ratio(max, current)``: ``current / max``, 1.0 when max is 0."""
    _check("usage_ratio", args, "i64", "i64")
    return 1.0 if args[0] == 0 else float(args[1]) / float(args[0])


def needs_eviction(*args: Any) -> bool:
    """``needs_eviction(max, current, threshold)``: ratio >= threshold, true when max is 0."""
    _check("needs_eviction", args, "i64", "i64", "f64")
    return True if args[0] == 0 else float(args[1]) / float(args[0]) >= args[2]


FUNCTIONS: dict[str, Callable[..., Any]] = {
    fn.__name__: fn
    for fn in (
        contains,
        starts_with,
        ends_with,
        trim,
        split,
        join,
        count_tokens,
        is_json,
        is_mermaid,
        is_markdown,
        is_empty,
        summarize,
        extract_modified,
        region_pinned,
        region_temporary,
        region_clearable,
        region_sliding_window,
        region_compacting,
        region_custom,
        region_entry,
        content_format,
        tokens_remaining,
        usage_ratio,
        needs_eviction,
    )
}
"""Name -> callable, registered on the region engine by the worker."""

SIGNATURES: dict[str, tuple[str, ...]] = {
    "contains": ("string", "string"),
    "starts_with": ("string", "string"),
    "ends_with": ("string", "string"),
    "trim": ("string",),
    "split": ("string", "string"),
    "join": ("array", "string"),
    "count_tokens": ("string",),
    "is_json": ("string",),
    "is_mermaid": ("string",),
    "is_markdown": ("string",),
    "is_empty": ("string",),
    "summarize": ("string", "i64"),
    "extract_modified": ("string",),
    "region_pinned": (),
    "region_temporary": (),
    "region_clearable": (),
    "region_sliding_window": ("i64",),
    "region_compacting": ("i64",),
    "region_custom": ("string", "bool"),
    "region_entry": ("string", "i64"),
    "content_format": ("string",),
    "tokens_remaining": ("i64", "i64"),
    "usage_ratio": ("i64", "i64"),
    "needs_eviction": ("i64", "i64", "f64"),
}
"""The reference's typed signatures.  Registered with these exact types, ``trim`` and
``is_empty`` shadow Rhai's built-in string methods as they do in the reference (where
the built-ins mutate in place / ignore whitespace); untyped, the built-ins win."""
