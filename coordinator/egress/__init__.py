"""Outbound HTTP for provider scripts: one shared client, the egress policy, SSE framing, env_var.

Workers have no network; every request a script makes arrives here as a host call and leaves
through :class:`Egress`, which is why the coordinator always knows whether a call had side effects.
"""

from __future__ import annotations

from coordinator.egress.budgets import EgressLimits
from coordinator.egress.client import CONNECT_TIMEOUT_SECS, MAX_REDIRECTS, Egress
from coordinator.egress.env import EnvResolver, is_credential_shaped
from coordinator.egress.errors import (
    EgressBudgetExhausted,
    EgressCapacityError,
    EgressDenied,
    EgressQuotaExceeded,
    HostError,
    ResponseBudgetExhausted,
    StreamBudgetExhausted,
    TenantRequestsExceeded,
    TenantResponseBytesExceeded,
)
from coordinator.egress.policy import EgressPolicy
from coordinator.egress.sse import SseFramer

__all__ = [
    "CONNECT_TIMEOUT_SECS",
    "MAX_REDIRECTS",
    "Egress",
    "EgressBudgetExhausted",
    "EgressCapacityError",
    "EgressDenied",
    "EgressLimits",
    "EgressPolicy",
    "EgressQuotaExceeded",
    "EnvResolver",
    "HostError",
    "ResponseBudgetExhausted",
    "SseFramer",
    "StreamBudgetExhausted",
    "TenantRequestsExceeded",
    "TenantResponseBytesExceeded",
    "is_credential_shaped",
]
