"""``rhaipool status``: a running service's workers, queues and tenants."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from coordinator._cli.service_access import open_client, report_refusal, service_options
from coordinator.client import ServiceError

__all__ = ["status_command", "status_text"]


def _mb(value: int) -> str:
    return f"{value / (1 << 20):.1f} MB"


def status_text(doc: dict[str, Any]) -> str:
    """The status document for a person: the admin's (workers, queues, tenants) or a tenant's own
    (its calls and quotas; the service shows a tenant no worker)."""
    lines = [f"uptime {doc.get('uptime_secs', 0):.0f} s{'  DRAINING' if doc.get('draining') else ''}"]
    if "queue" in doc:
        queue = doc["queue"]
        lines.append(
            f"queue: {queue['queued']} queued, {queue['inflight']} at workers, "
            f"{queue['http_inflight']} HTTP calls in flight"
        )
    if "workers" in doc:
        lines.append(f"workers ({len(doc['workers'])}):")
        for w in doc["workers"]:
            lines.append(
                f"  {w['id']:<6} pid {w['pid']:<8} {w['state']:<9} {_mb(w['memory_bytes']):>9} "
                f"{w['calls']:>7} calls  sandbox: {', '.join(w['sandbox']) or '-'}"
            )
    tenants = doc.get("tenants", [])
    lines.append(
        "tenants: " + (", ".join(f"{t['id']} ({t.get('regions', 0)} regions)" for t in tenants) or "-")
    )
    if "workers" not in doc:
        for tenant in tenants:
            for key, quota in sorted({**tenant.get("quotas", {}), **_pool_quotas(tenant)}.items()):
                lines.append(f"  {key}: {_quota_text(quota)}")
    return "\n".join(lines)


#: The pool's quota keys and the field of its usage each one bounds (``/api/status``, a tenant's ``pool``).
_POOL_USE = {
    "max_calls": "calls",
    "max_inflight": "inflight",
    "max_queued": "queued",
    "cpu_seconds_per_minute": "cpu_seconds",
    "max_loaded_scripts": "loaded_scripts",
    "max_loaded_script_bytes": "loaded_script_bytes",
}


def _pool_quotas(tenant: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The pool's quotas of a tenant as ``{key: {"used", "limit"}}`` (the service's own have that shape)."""
    pool = tenant.get("pool") or {}
    quotas = pool.get("quotas", {})
    return {
        key: {"limit": quotas[key], **({"used": pool[use]} if pool.get(use) is not None else {})}
        for key, use in _POOL_USE.items()
        if key in quotas
    }


def _quota_text(quota: dict[str, Any]) -> str:
    limit, used = quota.get("limit"), quota.get("used")
    if isinstance(used, float):
        used = f"{used:.2f}"
    if limit is None:
        return f"{'' if used is None else f'{used} '}(no limit)"
    return f"{used} of {limit}" if used is not None else f"{limit}"


@click.command("status")
@service_options
def status_command(server: str | None, config_path: Path | None, as_json: bool) -> None:
    """Workers (pid, state, memory, calls, sandbox layers), queues and tenants of a running service.

    The token is $RHAIPOOL_ADMIN_TOKEN (everything), else $RHAIPOOL_TOKEN (that tenant's own calls).
    """
    try:
        with open_client(server, config_path, as_json, admin=True) as client:
            doc = client.status()
    except ServiceError as exc:
        sys.exit(report_refusal(exc, as_json))
    click.echo(json.dumps(doc, ensure_ascii=False) if as_json else status_text(doc))
