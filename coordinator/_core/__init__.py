"""The pool's engine: scheduling, supervision, transport and the call lifecycle.

Generic over what scripts do: nothing here imports the region or provider
runtimes, egress or the CLI (``tests/test_layering.py`` holds that line). The
public names are re-exported by ``coordinator``.
"""
