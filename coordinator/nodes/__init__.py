"""Nodes: other machines that run workers for this coordinator, over CurveZMQ (docs/scaling.md).

Keys: key files (:mod:`coordinator.nodes.keys`), the coordinator's server-side authenticator over an
authorized-keys directory (:mod:`coordinator.nodes.auth`) and the ``[nodes]`` config table
(:mod:`coordinator.nodes.config`). On them: the coordinator's end of the link, which a ``Pool`` takes as
``nodes=NodeListener(...)`` (:mod:`coordinator.nodes.link`), and the node process, ``rhaipool node``
(:mod:`coordinator.nodes.node`); the wire is ``proto.nodes`` (PROTOCOL.md §14). The core never imports
this package: its seam is ``coordinator._core.fleet`` and ``coordinator._core.processes.Process``.
"""

from __future__ import annotations

from coordinator.nodes.auth import AuthorizedKeys, curve_authenticator, curve_client, curve_server
from coordinator.nodes.config import NodesConfig, parse_nodes_config
from coordinator.nodes.errors import KeyExists, KeyFileError, NodesConfigError
from coordinator.nodes.keys import KeyInfo, generate, list_keys, revoke
from coordinator.nodes.link import LinkSettings, NodeInfo, NodeListener
from coordinator.nodes.node import Node, NodeSettings

__all__ = [
    "AuthorizedKeys",
    "KeyExists",
    "KeyFileError",
    "KeyInfo",
    "LinkSettings",
    "Node",
    "NodeInfo",
    "NodeListener",
    "NodeSettings",
    "NodesConfig",
    "NodesConfigError",
    "curve_authenticator",
    "curve_client",
    "curve_server",
    "generate",
    "list_keys",
    "parse_nodes_config",
    "revoke",
]
