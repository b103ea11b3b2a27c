"""What both sides share beyond the wire: the script contract's terms, one definition for each.

``proto`` holds only what crosses the wire and how it is framed.  The engine budgets of each script
kind (``contract.budgets``) never cross it: the worker builds its engines from them, and the
coordinator's benchmarks build the in-process baseline from the same table.  The token estimates
(``contract.tokens``: a script's ``count_tokens_heuristic`` in the worker, the coordinator's fallback
count and region budgets) are one arithmetic for both sides, and ``contract.text`` holds Rust's
whitespace set, which both sides trim with.  This package imports only the standard library and
``proto`` (``contract.tokens`` imports the binding lazily, for its tiktoken counter).
"""

from contract.budgets import BUDGETS

__all__ = ["BUDGETS"]
