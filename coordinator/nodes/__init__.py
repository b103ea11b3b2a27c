"""Nodes: other machines that run workers for this coordinator, over CurveZMQ (ARCHITECTURE §6).

Today this package holds the keys side: key files (:mod:`coordinator.nodes.keys`), the coordinator's
server-side authenticator over an authorized-keys directory (:mod:`coordinator.nodes.auth`) and the
``[nodes]`` config table (:mod:`coordinator.nodes.config`). The node process and the coordinator's node
link build on them.
"""

from __future__ import annotations

from coordinator.nodes.auth import AuthorizedKeys, curve_authenticator, curve_client, curve_server
from coordinator.nodes.config import NodesConfig, parse_nodes_config
from coordinator.nodes.errors import KeyExists, KeyFileError, NodesConfigError
from coordinator.nodes.keys import KeyInfo, generate, list_keys, revoke

__all__ = [
    "AuthorizedKeys",
    "KeyExists",
    "KeyFileError",
    "KeyInfo",
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
