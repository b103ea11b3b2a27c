"""MkDocs hook: tables generated from the code, so the documentation cannot go stale.

The failure labels (``<!-- failure-labels -->``) come from ``coordinator.providers.failures``.

A page containing ``<!-- pool-options -->`` gets one table per configuration dataclass
(``PoolConfig``, ``Limits``, ``Deadlines``, ``Recycling``, ``RetryPolicy``): every field, its
default as the code has it, and the attribute's docstring.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
from typing import Any

MARKER = "<!-- pool-options -->"

#: What an option does when the code gives the field no docstring of its own.
FALLBACK: dict[str, str] = {
    "PoolConfig.workers": "Worker processes; `None`: one per usable CPU.",
    "PoolConfig.spares": "Warm spare workers kept started, so a replacement is ready in milliseconds.",
    "PoolConfig.queue_size": "Calls waiting for a worker, all tenants together; when full, the tenant "
    "holding the most queued calls loses its newest (`Overloaded`).",
    "PoolConfig.limits": "Per-worker process limits (`Limits`, below).",
    "PoolConfig.deadlines": "Timeouts (`Deadlines`, below).",
    "PoolConfig.recycling": "When healthy workers are replaced (`Recycling`, below).",
    "PoolConfig.retry": "Re-runs and quarantine (`RetryPolicy`, below).",
    "Limits.cpu_seconds": "RLIMIT_CPU of each worker: CPU seconds over its whole life.",
    "Limits.open_files": "RLIMIT_NOFILE of each worker.",
    "Limits.file_size": "RLIMIT_FSIZE of each worker: 0, a worker writes no file.",
    "Deadlines.call": "Default timeout of one call in seconds, re-runs included (`timeout=` per call "
    "overrides it).",
    "Deadlines.kill_grace": "Seconds past a call's deadline before the coordinator kills its worker.",
    "Deadlines.spawn": "Longest a new worker may take to start and report ready.",
    "Deadlines.heartbeat": "Seconds between two heartbeats of a worker.",
    "Deadlines.shutdown_grace": "On close, seconds workers get to exit before they are killed.",
    "Recycling.max_calls": "Calls after which a worker is replaced by a spare.",
    "Recycling.max_age": "Seconds after which a worker is replaced by a spare.",
    "Recycling.max_rss_growth": "Growth of resident memory (bytes) since start after which a worker is "
    "replaced.",
    "RetryPolicy.max_retries": "Re-runs of a call whose worker died of something the call did not cause.",
    "RetryPolicy.window": "Seconds over which strikes are counted.",
    "RetryPolicy.quarantine": "Seconds a quarantined script (or tenant) is refused with `Quarantined`.",
}


def _attribute_docs(cls: type) -> dict[str, str]:
    """Field name → the string literal written right below it in the class body."""
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, after in itertools.pairwise(body):
        named = isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
        if named and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
            text = " ".join(str(after.value.value).split())
            docs[node.target.id] = text.replace("``", "`")
    return docs


def _default(field: dataclasses.Field[Any]) -> str:
    if field.default is not dataclasses.MISSING:
        value = field.default
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1 << 20:
            return f"`{value}` ({_bytes(value)})"
        return f"`{value!r}`"
    if field.default_factory is not dataclasses.MISSING:  # a nested options class
        return f"`{getattr(field.default_factory, '__name__', '')}()`"
    return "required"


def _bytes(value: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20)):
        if value % size == 0:
            return f"{value // size} {unit}"
    return f"{value} bytes"


def options_table(cls: type) -> str:
    """A Markdown table of ``cls``'s fields: name, type, default, what it does."""
    docs = _attribute_docs(cls)
    rows = ["| option | type | default | what it does |", "|---|---|---|---|"]
    for field in dataclasses.fields(cls):
        kind = str(field.type).replace("|", "or")
        what = docs.get(field.name) or FALLBACK.get(f"{cls.__name__}.{field.name}", "")
        rows.append(f"| `{field.name}` | `{kind}` | {_default(field)} | {what} |")
    return "\n".join(rows)


def pool_options_markdown() -> str:
    """Every pool option, one section per options class, in the order a reader meets them."""
    from coordinator import Deadlines, Limits, PoolConfig, Recycling, RetryPolicy

    parts = []
    for cls in (PoolConfig, Limits, Deadlines, Recycling, RetryPolicy):
        summary = (inspect.getdoc(cls) or "").split("\n\n")[0].replace("``", "`")
        parts.append(f"#### `{cls.__name__}`\n\n{summary}\n\n{options_table(cls)}\n")
    return "\n".join(parts)


LABELS_MARKER = "<!-- failure-labels -->"


def failure_labels_markdown() -> str:
    """The failure labels and their remedy sentences, as the code has them."""
    from coordinator.providers.failures import FAILURE_KINDS, REASON_REMEDIES

    rows = ["| label | remedy |", "|---|---|"]
    for label, remedy in {**FAILURE_KINDS, **REASON_REMEDIES}.items():
        rows.append(f"| `{label}` | {remedy} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Replace the markers with the generated tables."""
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, pool_options_markdown())
    if LABELS_MARKER in markdown:
        markdown = markdown.replace(LABELS_MARKER, failure_labels_markdown())
    return markdown
