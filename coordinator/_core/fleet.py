"""``Fleet``: what a pool needs of machines that run workers for it (``coordinator.nodes``).

The core knows no network and no node: a fleet is handed the pool's ROUTER (whose ``relays`` and
``deliver`` carry a remote worker's frames as if it were local), its supervisor (``adopt``,
``exited``, ``drain``) and the pool's ``spawn`` (its tasks then live in the pool's TaskGroup), and
does the rest.  Defined here so the core imports nothing of the nodes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from coordinator._core.config import PoolConfig
    from coordinator._core.hostcalls import Spawn
    from coordinator._core.supervisor import Supervisor
    from coordinator._core.transport import Router

__all__ = ["Fleet"]


class Fleet(Protocol):
    """Started once the pool's ROUTER and supervisor exist; closed after the pool's workers are gone."""

    async def start(
        self, router: Router, supervisor: Supervisor, config: PoolConfig, spawn: Spawn
    ) -> None: ...

    async def aclose(self) -> None: ...
