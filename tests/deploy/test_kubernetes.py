"""deploy/k8s: every manifest (the placeholder Secrets under secrets/ included, and what the kustomization
builds) against the Kubernetes OpenAPI schemas of a pinned version (offline, strict: an unknown field
fails), then what the schemas cannot say: the security settings, that the pieces point at each other
(labels, ports, key files, the metric), that the config is one the service reads, that nodes can join
a coordinator that is not ready yet, that an edited config reaches the pod, that a bulk apply leaves the
Secrets alone and that the NetworkPolicies admit only what deploy/README.md says.
"""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from coordinator.nodes.config import parse_nodes_config
from coordinator.service.config import parse_service_config

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
KUBERNETES_VERSION = "1.34.0"  # the schemas the manifests are checked against (README says the same)
IMAGE_UID = 10001  # the Dockerfile's USER

Doc = dict[str, Any]


KUSTOMIZATION = K8S / "kustomization.yaml"


def manifests() -> list[Path]:
    """Every Kubernetes manifest in deploy/k8s, sub-folders included (the kustomizations are not)."""
    return sorted(p for p in K8S.rglob("*.yaml") if p.name != KUSTOMIZATION.name)


def documents() -> list[tuple[str, Doc]]:
    found = []
    for path in manifests():
        name = str(path.relative_to(K8S))
        found += [(name, doc) for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
    return found


def one(kind: str, name: str) -> Doc:
    matches = [d for _, d in documents() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"{kind}/{name}: {len(matches)} found"
    return matches[0]


def pod(deployment: str) -> Doc:
    spec: Doc = one("Deployment", deployment)["spec"]["template"]["spec"]
    return spec


def mount_of(deployment: str, volume_kind: str, name: str) -> Doc:
    spec = pod(deployment)
    volume = next(v for v in spec["volumes"] if v.get(volume_kind, {}).get(_ref(volume_kind)) == name)
    mounts = [m for c in spec["containers"] for m in c["volumeMounts"] if m["name"] == volume["name"]]
    assert len(mounts) == 1
    return {**mounts[0], "volume": volume}


def _ref(volume_kind: str) -> str:
    return {"secret": "secretName", "configMap": "name", "persistentVolumeClaim": "claimName"}[volume_kind]


def config() -> Doc:
    return tomllib.loads(one("ConfigMap", "rhaipool-config")["data"]["rhaipool.toml"])


def container_port(deployment: str, name: str) -> int:
    ports = [p for c in pod(deployment)["containers"] for p in c.get("ports", []) if p["name"] == name]
    assert len(ports) == 1
    return int(ports[0]["containerPort"])


@pytest.mark.parametrize(("file", "doc"), documents(), ids=lambda v: v if isinstance(v, str) else v["kind"])
def test_manifest_is_valid_for_the_pinned_kubernetes_version(file: str, doc: Doc) -> None:
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    if doc["kind"] != "Namespace":
        assert doc["metadata"]["namespace"] == "rhaipool", file


def test_the_pieces_the_issue_names_are_all_there() -> None:
    kinds = {(d["kind"], d["metadata"]["name"]) for _, d in documents()}
    assert {
        ("Deployment", "rhaipool-service"),
        ("Service", "rhaipool"),
        ("Deployment", "rhaipool-node"),
        ("NetworkPolicy", "rhaipool-node"),
        ("Secret", "rhaipool-node-keys"),
        ("Secret", "rhaipool-coordinator-keys"),
        ("HorizontalPodAutoscaler", "rhaipool-node"),
    } <= kinds
    namespace = one("Namespace", "rhaipool")["metadata"]["labels"]
    assert namespace["pod-security.kubernetes.io/enforce"] == "restricted"


@pytest.mark.parametrize("deployment", ["rhaipool-service", "rhaipool-node", "rhaipool-coordinators"])
def test_pods_run_restricted(deployment: str) -> None:
    spec = pod(deployment)
    assert spec["automountServiceAccountToken"] is False
    for host in ("hostNetwork", "hostPID", "hostIPC", "hostUsers"):
        assert host not in spec
    context = spec["securityContext"]
    assert context["runAsNonRoot"] is True
    assert context["runAsUser"] == context["runAsGroup"] == IMAGE_UID
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in spec["containers"] + spec.get("initContainers", []):
        own = container["securityContext"]
        assert own["allowPrivilegeEscalation"] is False
        assert own["readOnlyRootFilesystem"] is True
        assert own.get("privileged", False) is False
        assert own["capabilities"] == {"drop": ["ALL"]}
        assert {"cpu", "memory"} <= set(container["resources"]["limits"])
        assert {"cpu", "memory"} <= set(container["resources"]["requests"])
        assert container["image"] == "rhaipool:0.1.0"
        writable = {m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")}
        assert "/tmp" in writable, "workers need a writable /tmp for their ipc:// sockets"


def test_nodes_join_the_service_with_their_keys() -> None:
    args = pod("rhaipool-node")["containers"][0]["args"]
    assert args[0] == "node"
    option = dict(zip(args[1::2], args[2::2], strict=True))
    assert set(option) == {"--join", "--secret-key", "--server-key", "--workers"}
    service = one("Service", "rhaipool-nodes")
    nodes_port = next(p for p in service["spec"]["ports"] if p["name"] == "nodes")
    assert option["--join"] == f"tcp://{service['metadata']['name']}:{nodes_port['port']}"
    assert nodes_port["targetPort"] == "nodes"
    assert int(option["--workers"]) >= 1
    keys = mount_of("rhaipool-node", "secret", "rhaipool-node-keys")
    secret = one("Secret", "rhaipool-node-keys")["stringData"]
    for flag, file in (("--secret-key", "node.key_secret"), ("--server-key", "coordinator.key")):
        assert option[flag] == f"{keys['mountPath']}/{file}"
        assert file in secret


def test_service_config_is_read_by_the_service_and_matches_the_pod() -> None:
    data = config()
    serve = parse_service_config(data, base=Path("/etc/rhaipool"))
    assert serve.port == container_port("rhaipool-service", "http")
    assert data["serve"]["local_workers"] == 0
    nodes = parse_nodes_config(data, base=Path("/etc/rhaipool"), check_files=False)
    assert nodes is not None
    assert (nodes.host, nodes.port) == ("0.0.0.0", container_port("rhaipool-service", "nodes"))
    data_mount = mount_of("rhaipool-service", "persistentVolumeClaim", "rhaipool-data")
    assert serve.database.parent == Path(data_mount["mountPath"]) and not data_mount.get("readOnly")
    keys = mount_of("rhaipool-service", "secret", "rhaipool-coordinator-keys")
    secret_key = nodes.secret_key
    assert secret_key.parent == Path(keys["mountPath"])
    assert secret_key.name in one("Secret", "rhaipool-coordinator-keys")["stringData"]
    authorized = mount_of("rhaipool-service", "secret", "rhaipool-authorized-nodes")
    assert nodes.authorized_keys == Path(authorized["mountPath"])
    # a subPath mount never sees the Secret change: revoking would need a restart
    assert "subPath" not in authorized and "subPath" not in keys


def test_nodes_reach_a_coordinator_that_is_not_ready_yet() -> None:
    """With local_workers = 0, /readyz is false until a node joins: the node port must not wait for it."""
    assert config()["serve"]["local_workers"] == 0
    service_labels = one("Deployment", "rhaipool-service")["spec"]["template"]["metadata"]["labels"]
    joined = one("Service", "rhaipool-nodes")["spec"]
    assert joined["publishNotReadyAddresses"] is True
    assert joined["selector"].items() <= service_labels.items()
    assert [p["name"] for p in joined["ports"]] == ["nodes"], "only the CurveZMQ port skips readiness"
    api = one("Service", "rhaipool")["spec"]
    assert not api.get("publishNotReadyAddresses") and [p["name"] for p in api["ports"]] == ["http"]


def test_the_config_is_mounted_as_a_folder_so_an_edit_reaches_the_pod() -> None:
    mount = mount_of("rhaipool-service", "configMap", "rhaipool-config")
    assert "subPath" not in mount and mount["readOnly"] is True, "a subPath mount never sees an edit"
    args = one("Deployment", "rhaipool-service")["spec"]["template"]["spec"]["containers"][0]["args"]
    config_file = Path(args[args.index("--config") + 1])
    assert config_file.parent == Path(mount["mountPath"])
    assert config_file.name in one("ConfigMap", "rhaipool-config")["data"]
    secrets_key = mount_of("rhaipool-service", "secret", "rhaipool-secrets-key")
    key_file = Path(config()["serve"]["secrets_key_file"])
    assert key_file.parent == Path(secrets_key["mountPath"]) and "subPath" not in secrets_key
    assert key_file.name in one("Secret", "rhaipool-secrets-key")["stringData"]


def test_service_probes_and_single_writer() -> None:
    deployment = one("Deployment", "rhaipool-service")["spec"]
    assert deployment["replicas"] == 1 and deployment["strategy"] == {"type": "Recreate"}
    container = deployment["template"]["spec"]["containers"][0]
    assert container["args"] == ["serve", "--config", "/etc/rhaipool/config/rhaipool.toml"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_node_network_policy_lets_nodes_reach_only_the_coordinator() -> None:
    policy = one("NetworkPolicy", "rhaipool-node")["spec"]
    node_labels = one("Deployment", "rhaipool-node")["spec"]["template"]["metadata"]["labels"]
    service_labels = one("Deployment", "rhaipool-service")["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= node_labels.items()
    assert sorted(policy["policyTypes"]) == ["Egress", "Ingress"]
    assert policy.get("ingress", []) == []
    nodes_port = container_port("rhaipool-service", "nodes")
    coordinator_rules, dns_rules = [], []
    for rule in policy["egress"]:
        assert rule.get("to") and rule.get("ports"), "a rule without peers or ports allows everything"
        ports = {(p["protocol"], p["port"]) for p in rule["ports"]}
        if ports == {("TCP", nodes_port)}:
            (peer,) = rule["to"]
            assert set(peer) == {"podSelector"}
            assert peer["podSelector"]["matchLabels"].items() <= service_labels.items()
            coordinator_rules.append(rule)
        else:
            assert ports == {("UDP", 53), ("TCP", 53)}
            assert all(peer["podSelector"]["matchLabels"] == {"k8s-app": "kube-dns"} for peer in rule["to"])
            dns_rules.append(rule)
    assert len(coordinator_rules) == 1 and len(dns_rules) == 1


def test_coordinator_takes_node_connections_only_from_nodes() -> None:
    policy = one("NetworkPolicy", "rhaipool-service")["spec"]
    node_labels = one("Deployment", "rhaipool-node")["spec"]["template"]["metadata"]["labels"]
    nodes_port = container_port("rhaipool-service", "nodes")
    for rule in policy["ingress"]:
        if any(p["port"] == nodes_port for p in rule["ports"]):
            (peer,) = rule["from"]
            assert peer["podSelector"]["matchLabels"].items() <= node_labels.items()


def test_autoscaler_scales_nodes_on_the_queue_depth_the_service_exports() -> None:
    hpa = one("HorizontalPodAutoscaler", "rhaipool-node")["spec"]
    assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "rhaipool-node"}
    (metric,) = hpa["metrics"]
    assert metric["object"]["describedObject"] == {"apiVersion": "v1", "kind": "Service", "name": "rhaipool"}
    name = metric["object"]["metric"]["name"]
    assert name == "rhaipool_queue_depth"
    exporter = (ROOT / "coordinator" / "service" / "metrics.py").read_text()
    assert f'"{name}"' in exporter, "the HPA scales on a metric the service does not export"
    assert 1 <= hpa["minReplicas"] < hpa["maxReplicas"]


def test_the_coordinator_admits_on_its_http_port_only_the_peers_the_readme_names() -> None:
    policy = one("NetworkPolicy", "rhaipool-service")["spec"]
    http_port = container_port("rhaipool-service", "http")
    nodes_port = container_port("rhaipool-service", "nodes")
    peers = []
    for rule in policy["ingress"]:
        assert rule.get("from") and rule.get("ports"), "a rule without peers or ports admits everything"
        ports = {(p["protocol"], p["port"]) for p in rule["ports"]}
        assert ports in ({("TCP", http_port)}, {("TCP", nodes_port)})
        if ports == {("TCP", http_port)}:
            peers += rule["from"]
    assert sorted(map(str, peers)) == sorted(
        map(
            str,
            [
                {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}},
                {"podSelector": {"matchLabels": {"rhaipool.io/client": "true"}}},
                {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}},
            ],
        )
    )
    readme = (ROOT / "deploy" / "README.md").read_text()
    for said in ("ingress-nginx", "rhaipool.io/client", "monitoring", "metrics_token_sha256"):
        assert said in readme, f"deploy/README.md does not say who is admitted ({said})"


def _kustomization() -> Doc:
    doc: Doc = yaml.safe_load(KUSTOMIZATION.read_text())
    return doc


def test_the_kustomization_applies_every_manifest_but_the_secrets() -> None:
    doc = _kustomization()
    assert set(doc) == {"apiVersion", "kind", "resources"}
    assert (doc["apiVersion"], doc["kind"]) == ("kustomize.config.k8s.io/v1beta1", "Kustomization")
    top_level = sorted(p.name for p in manifests() if p.parent == K8S)
    assert sorted(doc["resources"]) == top_level, "a manifest the bulk apply would skip (or a missing one)"
    for name in doc["resources"]:
        kinds = {d["kind"] for d in yaml.safe_load_all((K8S / name).read_text()) if d}
        assert "Secret" not in kinds, f"{name}: a bulk apply would overwrite the real keys"
    secrets = [d for f, d in documents() if d["kind"] == "Secret"]
    assert secrets and all(f.startswith("secrets/") for f, d in documents() if d["kind"] == "Secret")


@pytest.mark.skipif(
    shutil.which("kubectl") is None, reason="kubectl (with its built-in kustomize) is not installed"
)
def test_what_the_kustomization_builds_is_valid_and_holds_no_secret() -> None:
    built = subprocess.run(
        ["kubectl", "kustomize", str(K8S)], capture_output=True, text=True, timeout=120, check=False
    )
    assert built.returncode == 0, built.stderr
    docs = [d for d in yaml.safe_load_all(built.stdout) if d is not None]
    for doc in docs:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    assert "Secret" not in {d["kind"] for d in docs}
    expected = {
        (d["kind"], d["metadata"]["name"])
        for f, d in documents()
        if not f.startswith(("secrets/", "coordinators/"))
    }
    assert {(d["kind"], d["metadata"]["name"]) for d in docs} == expected
