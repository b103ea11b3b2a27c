"""deploy/haproxy and deploy/nginx: the balancers' configurations parse with the real binaries, and hash
the tenant's credential (Authorization, else x-api-key) consistently with health checks where the
balancer has them. They are run as shipped by tests/coordinator/service/test_coordinators_cluster.py."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from coordinator.bench.cluster import HAPROXY_CONFIG, haproxy_config

ROOT = Path(__file__).resolve().parents[2]
NGINX = ROOT / "deploy" / "nginx" / "rhaipool-coordinators.conf"


@pytest.mark.skipif(
    shutil.which("haproxy") is None, reason="HAProxy is not installed (deploy/quickstart installs it)"
)
def test_haproxy_config_is_valid_as_shipped_and_with_other_servers(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "RHAIPOOL_LISTEN": "127.0.0.1:18080",
        **{f"RHAIPOOL_COORDINATOR_{i}": f"127.0.0.1:{9000 + i}" for i in (1, 2, 3)},
    }
    shipped = subprocess.run(
        ["haproxy", "-c", "-f", str(HAPROXY_CONFIG)], env=env, capture_output=True, text=True
    )
    assert shipped.returncode == 0, shipped.stdout + shipped.stderr
    five = tmp_path / "five.cfg"
    five.write_text(haproxy_config("127.0.0.1:18081", [f"127.0.0.1:{9100 + i}" for i in range(5)]))
    checked = subprocess.run(["haproxy", "-c", "-f", str(five)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert five.read_text().count("    server coordinator-") == 5


def test_haproxy_hashes_the_credential_consistently_and_checks_readiness() -> None:
    text = HAPROXY_CONFIG.read_text()
    assert "req.hdr(authorization)" in text and "req.hdr(x-api-key)" in text
    assert "balance hash var(txn.credential)" in text and "hash-type consistent" in text
    assert "option httpchk GET /readyz" in text
    assert "retry-on conn-failure" in text, "only a request that never reached a coordinator is retried"


@pytest.mark.skipif(
    shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists(),
    reason="nginx is not installed (deploy/quickstart installs nginx-light)",
)
def test_nginx_config_is_valid_and_hashes_both_credentials(tmp_path: Path) -> None:
    (tmp_path / "nginx.conf").write_text(f"events {{}}\nhttp {{\ninclude {NGINX};\n}}\n")
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    checked = subprocess.run(
        [
            nginx,
            "-t",
            "-c",
            str(tmp_path / "nginx.conf"),
            "-p",
            str(tmp_path),
            "-e",
            str(tmp_path / "error.log"),
        ],
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stderr
    text = NGINX.read_text()
    assert 'hash "$http_authorization$http_x_api_key" consistent;' in text
    assert "proxy_next_upstream error timeout;" in text, (
        "a request that reached a coordinator is not passed again"
    )
