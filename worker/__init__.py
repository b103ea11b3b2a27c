"""The sandboxed worker process (``python -m worker``); it never imports ``coordinator``.

Modules: ``__main__`` (sandbox then loop), ``loop`` (DEALER loop), ``engine``
(hardened engines, rhai error translation), ``cache`` (AST LRU), ``host_bridge``
(brokered host functions, chunk emission), ``functions`` (per-kind helper sets).
"""

__all__: list[str] = []
