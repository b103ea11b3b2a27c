"""Outbound HTTP for provider scripts: one shared client, the egress policy, SSE framing, env_var.

Workers have no network; every request a script makes arrives here as a host call and leaves
through :class:`Egress`, which is why the coordinator always knows whether a call had side effects.
"""

from __future__ import annotations

from coordinator.egress.budgets import EgressLimits, EgressQuota
from coordinator.egress.client import CONNECT_TIMEOUT_SECS, MAX_REDIRECTS, Egress
from coordinator.egress.env import EnvResolver, is_credential_shaped
from coordinator.egress.errors import (
    EgressBudgetExhausted,
    EgressCapacityError,
    EgressConfigError,
    EgressDenied,
    EgressError,
    EgressQuotaExceeded,
    HostError,
    ResponseBudgetExhausted,
    StreamBudgetExhausted,
    TenantRequestsExceeded,
    TenantResponseBytesExceeded,
)
from coordinator.egress.operator import OperatorEgress, parse_operator_egress
from coordinator.egress.policy import EgressPolicy
from coordinator.egress.secrets import PLACEHOLDER_PREFIX, SecretMisuse, Secrets
from coordinator.egress.sse import SseFramer

__all__ = [
    "CONNECT_TIMEOUT_SECS",
    "MAX_REDIRECTS",
    "PLACEHOLDER_PREFIX",
    "Egress",
    "EgressBudgetExhausted",
    "EgressCapacityError",
    "EgressConfigError",
    "EgressDenied",
    "EgressError",
    "EgressLimits",
    "EgressPolicy",
    "EgressQuota",
    "EgressQuotaExceeded",
    "EnvResolver",
    "HostError",
    "OperatorEgress",
    "ResponseBudgetExhausted",
    "SecretMisuse",
    "Secrets",
    "SseFramer",
    "StreamBudgetExhausted",
    "TenantRequestsExceeded",
    "TenantResponseBytesExceeded",
    "is_credential_shaped",
    "parse_operator_egress",
]
