"""The nodes package's exceptions::

RhaipoolError (proto.errors)
├── KeyFileError           a key operation that cannot be done (bad input: exit code 2 in the CLI)
│   └── KeyExists          the key file is there already; keys are never overwritten (exit code 1)
├── NodesConfigError       the [nodes] table of the service config is wrong          .where
└── SessionEnded           a node's session with its coordinator ended (reset, silence, drain)  .leave
"""

from __future__ import annotations

from proto.errors import RhaipoolError

__all__ = ["KeyExists", "KeyFileError", "NodesConfigError", "SessionEnded"]


class KeyFileError(RhaipoolError):
    """A key operation that cannot be done (bad name, missing key or directory, unreadable file)."""


class KeyExists(KeyFileError):
    """The key file is there already: keys are never overwritten."""


class NodesConfigError(RhaipoolError):
    """The ``[nodes]`` table names something wrong: the message says which key and why."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where


class SessionEnded(RhaipoolError):
    """A node's session with its coordinator ended; ``leave`` says whether the node leaves or rejoins."""

    def __init__(self, why: str, leave: bool = False) -> None:
        super().__init__(why)
        self.leave = leave
