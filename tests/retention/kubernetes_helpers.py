"""The Kubernetes manifest the project ships (conf/kubernetes/sidecar.yaml), read the way the
kubelet reads it: the sidecar container and the paths its probes ask."""

from __future__ import annotations

from pathlib import Path

import yaml

MANIFEST = Path(__file__).resolve().parents[2] / "conf" / "kubernetes" / "sidecar.yaml"


def manifest_documents() -> list[dict]:
    return list(yaml.safe_load_all(MANIFEST.read_text()))


def sidecar_container() -> dict:
    """The `retention` container, wherever the pod declares it."""
    pod = next(d for d in manifest_documents() if d["kind"] == "Pod")
    containers = pod["spec"].get("initContainers", []) + pod["spec"]["containers"]
    return next(c for c in containers if c["name"] == "retention")


def probe_path(kind: str) -> str:
    """The HTTP path of the sidecar's `kind` probe (livenessProbe, startupProbe)."""
    return sidecar_container()[kind]["httpGet"]["path"]
