"""What both sides share beyond the wire: the script contract's terms, one definition for each.

``proto`` holds only what crosses the wire and how it is framed.  The engine budgets of each script
kind (``contract.budgets``) never cross it: the worker builds its engines from them, and the
coordinator's benchmarks build the in-process baseline from the same table.  This package imports
only the standard library and ``proto``.
"""

from contract.budgets import BUDGETS

__all__ = ["BUDGETS"]
