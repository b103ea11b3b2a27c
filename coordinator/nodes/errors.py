"""The nodes package's exceptions, in the pool family (``coordinator.errors.PoolFamilyError``):
a key operation that cannot be done (``KeyFileError``; ``KeyExists``: keys are never overwritten),
a wrong ``[nodes]`` table (``NodesConfigError``), and a node's session with its coordinator ending
(``SessionEnded``). The README draws the tree.
"""

from __future__ import annotations

from coordinator.errors import PoolFamilyError

__all__ = ["KeyExists", "KeyFileError", "NodesConfigError", "SessionEnded"]


class KeyFileError(PoolFamilyError):
    """A key operation that cannot be done (bad name, missing key or directory, unreadable file)."""


class KeyExists(KeyFileError):
    """The key file is there already: keys are never overwritten."""


class NodesConfigError(PoolFamilyError):
    """The ``[nodes]`` table names something wrong: the message says which key and why."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where


class SessionEnded(PoolFamilyError):
    """A node's session with its coordinator ended; ``leave`` says whether the node leaves or rejoins."""

    def __init__(self, why: str, leave: bool = False) -> None:
        super().__init__(why)
        self.leave = leave
