"""The ``rhaipool`` command line: commands, presentation, scenarios and the demo.

Everything here is an application of the library below it; nothing in the
library imports it back.
"""

from coordinator._cli.main import main

__all__ = ["main"]
