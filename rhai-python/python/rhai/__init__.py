"""rhai-python: run Rhai scripts from Python with the real ``rhai`` engine.

Built for untrusted scripts: every limit is explicit, ``eval``/``import`` do not
compile, ``sleep`` respects deadlines, output is captured, and a running script
can be stopped by a timeout or a ``CancelToken`` from inside the engine.
"""

from __future__ import annotations

from rhai._rhai import (
    RHAI_VERSION,
    Array,
    Callback,
    CallResult,
    CancelToken,
    Codec,
    Engine,
    FnPtr,
    HostLine,
    Lane,
    ResidentLists,
    Script,
    Wire,
    __version__,
    bind_line,
    current_call_remaining,
    parse_json,
    tiktoken_count,
    to_json,
)
from rhai.errors import (
    CallDepthExceeded,
    Cancelled,
    CompileError,
    DataTooLarge,
    DeadlineExceeded,
    FunctionNotFound,
    LimitExceeded,
    RhaiError,
    ScriptError,
    ScriptThrow,
    Throw,
    TooManyOperations,
)

__all__ = [
    "RHAI_VERSION",
    "Array",
    "CallDepthExceeded",
    "CallResult",
    "Callback",
    "CancelToken",
    "Cancelled",
    "Codec",
    "CompileError",
    "DataTooLarge",
    "DeadlineExceeded",
    "Engine",
    "FnPtr",
    "FunctionNotFound",
    "HostLine",
    "Lane",
    "LimitExceeded",
    "ResidentLists",
    "RhaiError",
    "Script",
    "ScriptError",
    "ScriptThrow",
    "Throw",
    "TooManyOperations",
    "Wire",
    "__version__",
    "bind_line",
    "current_call_remaining",
    "parse_json",
    "tiktoken_count",
    "to_json",
]
