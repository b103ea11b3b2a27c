"""The hand-written stubs match the native module (mypy's stubtest, against the built extension)."""

from __future__ import annotations

import subprocess
import sys


def test_stubs_match_the_native_module() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "rhai._rhai"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
