"""conf/kubernetes/cluster-cache-daemonset.yaml (the per-node sidecar governing the caches of
cluster logs) against Kubernetes' published schemas, strictly, for every version from 1.29 on; its
configuration loads as the sidecar loads it, its logs lie in the node's directory mounted at the
same path, and its probes are sidecar.yaml's."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import all_versions

from kubernetes_helpers import sidecar_container
from policies import load_config
from retention.web.routes import ROUTES

MANIFEST = Path(__file__).resolve().parents[2] / "conf" / "kubernetes" / "cluster-cache-daemonset.yaml"
SUPPORTED = [v for v in all_versions() if tuple(int(p) for p in v.split(".")[:2]) >= (1, 29)]


def _documents() -> dict[str, dict]:
    return {d["kind"]: d for d in yaml.safe_load_all(MANIFEST.read_text())}


@pytest.mark.parametrize("version", SUPPORTED)
def test_every_document_validates_strictly_against_each_version(version):
    documents = _documents()
    assert set(documents) == {"Secret", "DaemonSet"}
    for document in documents.values():
        kubernetes_validate.validate(document, version, strict=True)


def test_its_configuration_loads_and_names_logs_in_the_node_directory_at_the_same_path(tmp_path):
    documents = _documents()
    (tmp_path / "retention.yaml").write_text(documents["Secret"]["stringData"]["retention.yaml"])
    config = load_config(tmp_path / "retention.yaml", base_dir=tmp_path)
    spec = documents["DaemonSet"]["spec"]["template"]["spec"]
    [container] = spec["containers"]
    host = next(v for v in spec["volumes"] if "hostPath" in v)
    mount = next(m for m in container["volumeMounts"] if m["name"] == host["name"])
    assert mount["mountPath"] == host["hostPath"]["path"]
    assert config.logs and all(str(log.path).startswith(mount["mountPath"] + "/") for log in config.logs.values())
    assert str(config.service.audit).startswith(mount["mountPath"] + "/")


def test_its_probes_are_the_pod_sidecar_s():
    [container] = _documents()["DaemonSet"]["spec"]["template"]["spec"]["containers"]
    pod_sidecar = sidecar_container()
    for kind in ("startupProbe", "livenessProbe"):
        assert container[kind] == pod_sidecar[kind]
        assert ROUTES[container[kind]["httpGet"]["path"]].handler == "livez"
    assert "readinessProbe" not in container
