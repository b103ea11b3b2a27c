"""Type stubs for the native module of rhai-python (hand-written; see ``rhai/__init__.py``)."""

from collections.abc import Callable, Iterable, Iterator
from typing import Any, final

__all__ = [
    "RHAI_VERSION",
    "Array",
    "CallResult",
    "Callback",
    "CancelToken",
    "Codec",
    "Engine",
    "FnPtr",
    "HostLine",
    "Lane",
    "ResidentLists",
    "Script",
    "Wire",
    "__version__",
    "bind_line",
    "current_call_remaining",
    "parse_json",
    "tiktoken_count",
    "to_json",
]

__version__: str
RHAI_VERSION: str

@final
class Array:
    """A Rhai array held in Rust form: its items are converted once, when added.

    Wherever an ``Array`` appears in a call's arguments (at any depth, e.g. as
    ``ctx["entries"]``) the script gets its own copy, made without converting
    anything from Python again; what the script does to it never reaches the
    held items. For a list passed to many calls that changes by appends and
    removals (a region's entries).
    """

    def __new__(cls, items: Iterable[Any] | None = None) -> Array:
        """Convert every item now, as a call argument would be converted.

        Raises:
            TypeError, OverflowError, ValueError: an item cannot be converted (named ``items[i]...``).
        """
    def extend(self, items: Iterable[Any]) -> None:
        """Append the converted ``items``; nothing is appended if one cannot be converted."""
    def remove(self, indices: list[int]) -> None:
        """Remove the items at ``indices`` (any order, repeats allowed); all-or-nothing.

        Raises:
            IndexError: an index is negative or not below ``len(self)``.
        """
    def to_list(self) -> list[Any]:
        """The items converted back to Python: a new list, for inspection."""
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[Any]: ...

@final
class CancelToken:
    """A thread-safe flag that stops every call using it from inside the engine."""

    def __init__(self) -> None: ...
    def cancel(self) -> None:
        """Ask running calls to stop (idempotent)."""
    @property
    def cancelled(self) -> bool:
        """Whether ``cancel`` was called."""

@final
class CallResult:
    """The value of a call plus what it left behind."""

    @property
    def value(self) -> Any: ...
    @property
    def output(self) -> list[str]:
        """Lines written by ``print``/``debug``, up to the engine's output limit."""
    @property
    def output_truncated(self) -> bool: ...
    @property
    def operations(self) -> int:
        """Rhai operations counted for the call."""
    @property
    def elapsed(self) -> float:
        """Seconds spent running the script."""

@final
class FnPtr:
    """A script function pointer seen from Python; pass it back to a script."""

    @property
    def name(self) -> str: ...

@final
class Callback:
    """A script closure handed to a host function; callable only during that host call."""

    @property
    def name(self) -> str: ...
    def __call__(self, *args: Any) -> Any: ...

@final
class Script:
    """A compiled script; immutable and safe to call from many threads at once."""

    @property
    def name(self) -> str: ...
    @property
    def functions(self) -> list[tuple[str, int]]:
        """Public script functions as ``(name, arity)``, sorted."""
    def has_function(self, name: str, arity: int) -> bool: ...
    def call(
        self, name: str, *args: Any, timeout: float | None = None, cancel: CancelToken | None = None
    ) -> Any:
        """Run one public function on a fresh scope (top-level statements run first).

        Raises:
            FunctionNotFound: no public function ``name`` with ``len(args)`` parameters.
            ScriptError, LimitExceeded, Cancelled: the script failed, hit a limit or was stopped.
            TypeError, OverflowError, ValueError: an argument or the result cannot be converted.
        """
    def call_detailed(
        self, name: str, *args: Any, timeout: float | None = None, cancel: CancelToken | None = None
    ) -> CallResult:
        """Like ``call``, and also return captured output, operations and elapsed time."""

@final
class Lane:
    """A worker's plain region call from its CALL frame to its RESULT frame in one native step.

    It runs only a plainly valid CALL (op ``call``, kind ``region``) of a script given to ``put``
    (a ``source`` sent along is ignored), applying a ``resident`` delta to ``resident`` first;
    anything else is left to the caller's ``Codec``, which also writes a RESULT whose value the
    lane cannot write from Rhai values (one the wire flattens or refuses). The frame layout comes
    from the caller: ``call_header``/``result_header`` (signature, version and command bytes),
    ``max_id``, ``max_body`` (encoded body bytes), ``max_container`` (elements of one array or
    map), ``max_depth`` (container nesting written plainly), ``max_resident_key`` (characters).
    """

    def __new__(
        cls,
        *,
        call_header: bytes,
        result_header: bytes,
        max_id: int,
        max_body: int,
        max_container: int,
        max_depth: int,
        codec: Codec,
        max_resident_key: int = 128,
        resident: ResidentLists | None = None,
        reply_header: bytes | None = None,
    ) -> Lane: ...
    def put(self, sha: str, script: Script) -> None:
        """Serve calls of script ``sha`` from now on."""
    def discard(self, sha: str) -> None:
        """Stop serving calls of script ``sha``."""
    def take_used(self) -> list[str]:
        """Scripts run since the last call, least recently used first."""
    def open_line(self, line: HostLine) -> None:
        """Route the HOST_REPLY frames of call ``line.id`` to ``line``."""
    def close_line(self, id: int) -> None:
        """Stop routing call ``id``'s HOST_REPLY frames."""
    def __len__(self) -> int: ...
    def run(self, frame: bytes) -> bytes | tuple[Any, ...] | None:
        """Run the CALL in ``frame`` if the lane can.

        Returns its RESULT frame (or the ERROR ``InvalidValue`` when its value has no wire form);
        ``(id, exception)`` when the call failed (the exception ``Script.call`` raises);
        ``(id, "missing", base)`` when its ``resident`` delta applies to a version of the list not
        held; ``None`` when nothing ran.
        """

@final
class Codec:
    """A worker's reader of every message it receives and writer of every message it sends.

    The reader checks what rhaipool's ``proto.decode`` checks (signature, command, caps, every
    field) and the writers write the bytes ``proto.encode`` writes. The frame layout and
    vocabulary come from the caller: ``signature`` (``RHP`` and the version byte), ``commands``
    (command name -> byte), ``max_id``, ``max_body``, ``max_container``, ``max_depth`` (nesting
    written plainly; deeper bodies are flattened), ``max_resident_key``, ``ops`` and ``kinds``
    (wire string -> the member handed back), ``op_call``/``kind_region`` (the members a resident
    CALL needs) and ``invalid_value`` (the class of the ERROR a value without wire form ends in).
    """

    def __new__(
        cls,
        *,
        signature: bytes,
        commands: dict[str, int],
        max_id: int,
        max_body: int,
        max_container: int,
        max_depth: int,
        max_resident_key: int,
        ops: dict[str, Any],
        kinds: dict[str, Any],
        op_call: Any,
        kind_region: Any,
        invalid_value: Any,
    ) -> Codec: ...
    def read(self, frames: list[bytes]) -> tuple[Any, ...]:
        """The message in ``frames`` as ``(command byte, field, ...)``, its fields in the order of
        ``proto``'s message class; raises ``ValueError`` (``OverflowError`` past a cap) for what
        ``proto.decode`` refuses and for a command only a worker sends."""
    def ready(self, pid: int, versions: list[int], capacity: int, sandbox: Any, probe: Any) -> bytes:
        """READY; raises ``ValueError`` or ``OverflowError`` for a value without wire form."""
    def heartbeat(self, stats: Any) -> bytes:
        """HEARTBEAT; raises as ``ready``."""
    def goodbye(self, reason: Any) -> bytes:
        """GOODBYE; raises as ``ready``."""
    def credit(self, id: int, hid: int, n: int) -> bytes:
        """CREDIT."""
    def host_call(self, id: int, hid: int, name: str, args: Any) -> bytes:
        """HOST_CALL; raises as ``ready`` (nothing is written)."""
    def result(self, id: int, value: Any, wall: float, cpu: float, ops: int, output: Any) -> bytes:
        """RESULT (peak RSS measured here), or the ERROR ``InvalidValue`` if a value has no wire form."""
    def error(
        self,
        id: int,
        cls: Any,
        message: Any,
        kind: Any,
        line: Any,
        column: Any,
        value: Any,
        limit: Any,
    ) -> bytes:
        """ERROR, or the ERROR ``InvalidValue`` if ``value`` has no wire form."""
    def sizes(self, items: list[Any]) -> list[int]:
        """Each item's msgpack size as the wire packs it alone."""
    def chunk(self, id: int, seq: int, value: Any) -> bytes:
        """CHUNK, or the chunk carrying its error if ``value`` has no wire form."""

@final
class HostLine:
    """One provider call's brokered host calls (``Engine.register_brokered``), made natively.

    A thread bound to it (``bind_line``) writes each HOST_CALL frame itself and sends it on
    ``wire`` without the GIL; arguments it does not write from Rhai values (a value the wire
    flattens or refuses) go to ``fallback(hid, name, args)`` as Python values (the worker writes
    them with its ``Codec``). The reply comes through ``Wire.wait``/``Wire.drain`` (with a
    ``Lane`` the line is open on) or ``deliver``, waited for with the GIL released;
    ``fail(reason)`` raises what a wait ends in (``"deadline"``, ``"cancel"``). With ``wait``,
    replies come from ``wait(hid)`` (``(ok, value)``) instead.
    """

    def __new__(
        cls,
        id: int,
        *,
        header: bytes,
        max_body: int,
        max_container: int,
        max_depth: int,
        wire: Wire,
        fallback: Callable[[int, str, list[Any]], None],
        fail: Callable[[str], None],
        wait: Callable[[int], tuple[bool, Any]] | None = None,
    ) -> HostLine: ...
    @property
    def id(self) -> int: ...
    @property
    def host_calls(self) -> int:
        """Host calls made so far."""
    @property
    def pending(self) -> int:
        """The host call a native wait is for now (0: none)."""
    def next_hid(self) -> int:
        """The next host call's id."""
    def deliver(self, hid: int, ok: bool, value: Any) -> bool:
        """Hand the waiting thread a reply; ``False`` if nobody waits for host call ``hid``."""
    def cancel(self) -> None:
        """End a native wait (now or when it starts) in ``fail("cancel")``."""

@final
class Wire:
    """A zmq socket (pyzmq's ``Socket.underlying``, its ``Socket.FD``) driven natively through
    the libzmq of the extension at ``library``: sends from any thread without the GIL, and the
    loop thread's receive path, which hands the HOST_REPLY frames a ``Lane`` routes to the
    ``HostLine`` waiting for them and returns every other message."""

    def __new__(cls, socket: int, *, fd: int, library: str) -> Wire: ...
    def send(self, frames: list[bytes], *, loop_thread: bool = False) -> None:
        """Send from any thread, in order (``loop_thread``: no edge check)."""
    def drain(self, lane: Lane) -> list[list[bytes]]:
        """(Loop thread) every message pending now, but the replies ``lane`` routes."""
    def wait(self, lane: Lane, timeout: float) -> list[list[bytes]]:
        """(Loop thread) wait up to ``timeout`` seconds for messages ``lane`` does not route."""
    def close(self) -> None:
        """Send what is queued, then stop using the socket."""

def bind_line(line: HostLine | None) -> HostLine | None:
    """Make ``line`` the one this thread's brokered calls use; returns the previous one."""

@final
class ResidentLists:
    """Lists kept in Rhai form between calls, by ``(tenant, key)``, updated by deltas; bounded by
    count and by bytes (the items' msgpack sizes), least recently used first out."""

    def __new__(cls, *, max_keys: int, max_bytes: int) -> ResidentLists: ...
    @property
    def bytes(self) -> int:
        """Sum of the kept items' sizes."""
    def __len__(self) -> int: ...
    def apply(
        self,
        tenant: str,
        key: str,
        version: int,
        base: int | None,
        drop: list[int],
        items: list[Any],
        sizer: Callable[[list[Any]], list[int]],
    ) -> Array | None:
        """Replace the list (``base`` is ``None``) or apply a delta to version ``base``: ``items``
        appended (converted as call arguments are; ``sizer(items)`` gives their sizes), then the
        items at ``drop`` (indices into the list as it was, ascending) removed.

        Returns the list for the hook (a copy), or ``None`` when version ``base`` is not held.
        A list whose delta does not apply, or whose items cannot be converted, is forgotten.
        """

@final
class Engine:
    """A Rhai engine configured for untrusted scripts; every limit explicit."""

    def __new__(
        cls,
        *,
        max_operations: int = 500_000,
        max_call_levels: int = 64,
        max_expr_depth: int = 128,
        max_function_expr_depth: int = 128,
        max_string_size: int = 1_000_000,
        max_array_size: int = 10_000,
        max_map_size: int = 10_000,
        max_variables: int = 10_000,
        max_functions: int = 1_000,
        output_limit: int = 65_536,
        json_functions: bool = True,
        check_argument_sizes: bool = True,
        max_cpu_seconds: float | None = None,
    ) -> Engine:
        """Every limit explicit and positive.

        Arguments:
            output_limit: bytes of ``print``/``debug`` output kept per call.
            json_functions: give scripts ``parse_json`` and ``to_json`` of any value
                (region hooks do not get them, as in the reference runtime).
            check_argument_sizes: size-check call arguments against the limits
                (the reference runtime passes hook arguments unchecked).
            max_cpu_seconds: CPU time of its thread one call may spend (nested calls excepted);
                beyond, ``TooManyOperations``: one operation may copy or free a whole value, so the
                operation count alone does not bound the cost.  Default: 2 us per operation.
        """
    def register_brokered(self, name: str, signatures: list[list[str]]) -> None:
        """Register ``name`` as a brokered host call made through the thread's ``HostLine``."""
    def register_fn(self, name: str, func: Callable[..., Any], *, types: list[str] | None = None) -> None:
        """Make ``func`` a script function at every arity it accepts (up to 8).

        With ``types`` (``string``, ``int``, ``float``, ``bool``, ``char``, ``array``,
        ``map``, ``blob``, ``fnptr``, ``any``), register exactly that typed signature instead;
        typed functions take precedence over the standard library's.
        """
    def compile(self, source: str, name: str = "<script>") -> Script:
        """Compile ``source``.

        Raises:
            CompileError: with ``line`` and ``column``.
        """

def current_call_remaining() -> float | None:
    """Seconds left before the current call's deadline (for host functions), or None."""

def to_json(value: Any) -> str:
    """Compact JSON with keys sorted by bytes, as scripts' ``to_json`` writes it."""

def parse_json(text: str) -> Any:
    """Any JSON value, converted as scripts see it; ``ValueError`` when invalid."""

def tiktoken_count(text: str, model: str) -> int:
    """Tokens of ``text`` in ``model``'s tiktoken BPE (``cl100k_base`` for a model tiktoken-rs does not
    know), each special token counted as one; ``UnicodeEncodeError`` for a lone surrogate."""
