"""The sandboxed worker process (``python -m worker``); it never imports ``coordinator``.

Modules: ``__main__`` (sandbox then loop), ``loop`` (DEALER loop), ``engine``
(hardened engines, rhai error translation), ``cache`` (AST LRU), ``host_bridge``
(brokered host functions, chunk emission), ``functions`` (per-kind helper sets),
``resident`` (region entry lists), ``wire`` (the worker's one codec, native: every frame it
receives is read, and every frame it sends written, by the binding).
"""

__all__: list[str] = []
