"""The sandboxed worker process (``python -m worker``); it never imports ``coordinator``."""
