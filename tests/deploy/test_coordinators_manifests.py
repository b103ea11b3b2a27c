"""deploy/k8s/coordinators: several coordinators over one PostgreSQL database. What the kustomization
builds is valid for the pinned Kubernetes version; the config is one the service reads as a shared
database; the ingress hashes both credentials the API takes; readiness (the database reachable) gates
the traffic; the password comes from a Secret that is never part of a bulk apply. The manifests
themselves are also checked one by one, with the restricted pod rules, by test_kubernetes.py."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from coordinator.service.config import parse_service_config

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "deploy" / "k8s" / "coordinators"
KUBERNETES_VERSION = "1.34.0"


def _docs() -> list[dict[str, Any]]:
    found = []
    for path in sorted(FOLDER.glob("*.yaml")):
        if path.name != "kustomization.yaml":
            found += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return found


def _one(kind: str) -> dict[str, Any]:
    matches = [d for d in _docs() if d["kind"] == kind]
    assert len(matches) == 1, kind
    return matches[0]


def test_the_kustomization_lists_every_manifest_and_no_secret() -> None:
    kustomization = yaml.safe_load((FOLDER / "kustomization.yaml").read_text())
    names = sorted(p.name for p in FOLDER.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(kustomization["resources"]) == names
    assert "Secret" not in {d["kind"] for d in _docs()}


def test_the_config_is_a_shared_database_the_service_reads() -> None:
    raw = tomllib.loads(_one("ConfigMap")["data"]["rhaipool.toml"])
    config = parse_service_config(raw, Path("/etc/rhaipool/config"))
    assert config.database_url is not None and config.database_url.startswith("postgresql://")
    assert ":" not in config.database_url.split("//", 1)[1].split("@", 1)[0], "no password in the ConfigMap"
    assert config.lease_secs == 10


def test_replicas_are_ready_only_with_the_database_and_get_its_password_from_a_secret() -> None:
    deployment = _one("Deployment")
    assert deployment["spec"]["replicas"] == 3
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert not any(m["mountPath"].startswith("/var/lib") for m in container["volumeMounts"]), "no state"
    env = {e["name"]: e for e in container["env"]}
    ref = env["PGPASSWORD"]["valueFrom"]["secretKeyRef"]
    secrets = [
        d
        for d in yaml.safe_load_all((ROOT / "deploy/k8s/secrets/database.yaml").read_text())
        if d and d["kind"] == "Secret"
    ]
    assert [(s["metadata"]["name"], ref["key"] in s["stringData"]) for s in secrets] == [(ref["name"], True)]


def test_the_ingress_hashes_the_tenants_credential_onto_the_coordinators_service() -> None:
    ingress, service = _one("Ingress"), _one("Service")
    hashed = ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/upstream-hash-by"]
    assert "$http_authorization" in hashed and "$http_x_api_key" in hashed
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend["name"] == service["metadata"]["name"]
    pod_labels = _one("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()


@pytest.mark.skipif(
    shutil.which("kubectl") is None, reason="kubectl (with its built-in kustomize) is not installed"
)
def test_what_the_kustomization_builds_is_valid() -> None:
    built = subprocess.run(
        ["kubectl", "kustomize", str(FOLDER)], capture_output=True, text=True, timeout=120, check=False
    )
    assert built.returncode == 0, built.stderr
    docs = [d for d in yaml.safe_load_all(built.stdout) if d is not None]
    for doc in docs:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    assert {(d["kind"], d["metadata"]["name"]) for d in docs} == {
        (d["kind"], d["metadata"]["name"]) for d in _docs()
    }


def test_replicas_reach_each_other_to_forward_and_the_database() -> None:
    policy = _one("NetworkPolicy")["spec"]
    me = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "rhaipool-coordinator"}}}
    assert policy["podSelector"] == me["podSelector"]
    assert any(
        me in rule["from"] and {"protocol": "TCP", "port": 8765} in rule["ports"]
        for rule in policy["ingress"]
    )
    assert any(
        me in rule.get("to", []) and rule["ports"] == [{"protocol": "TCP", "port": 8765}]
        for rule in policy["egress"]
    )
    assert any({"protocol": "TCP", "port": 5432} in rule["ports"] for rule in policy["egress"])
