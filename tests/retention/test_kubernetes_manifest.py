"""conf/kubernetes/sidecar.yaml against Kubernetes' published schemas (kubernetes-validate bundles
them, strict: an unknown field is an error), and which versions take its native sidecar form.

What its probe paths answer under each condition is tested on real sidecars where the condition
is made: tests/retention/test_health_contract.py (a read-only mount, a second owner, a vanished
log, the scheduler stopped, the disk check stalled) and test_service_signals.py (a bad file on
SIGHUP), each asking the path this manifest names (`kubernetes_helpers.probe_path`)."""

from __future__ import annotations

import pytest
import kubernetes_validate
from kubernetes_validate.utils import all_versions

from kubernetes_helpers import manifest_documents, probe_path, sidecar_container
from retention.web.routes import ROUTES

NATIVE_SIDECARS_FROM = (1, 29)       # SidecarContainers on by default (beta); stable from 1.33


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


SUPPORTED = [v for v in all_versions() if _minor(v) >= NATIVE_SIDECARS_FROM]


@pytest.mark.parametrize("version", SUPPORTED)
def test_every_document_validates_strictly_against_each_version_with_native_sidecars(version):
    documents = manifest_documents()
    assert {d["kind"] for d in documents} == {"Secret", "Pod"}
    for document in documents:
        kubernetes_validate.validate(document, version, strict=True)


def test_a_cluster_older_than_1_28_refuses_the_native_form_as_the_docs_say():
    pod = next(d for d in manifest_documents() if d["kind"] == "Pod")
    with pytest.raises(kubernetes_validate.ValidationError, match="restartPolicy"):
        kubernetes_validate.validate(pod, "1.27.0", strict=True)
    kubernetes_validate.validate(pod, "1.28.0", strict=True)      # 1.28 knows the field (behind a gate)


def test_the_probes_ask_the_liveness_endpoint_and_nothing_gates_the_applications_readiness():
    sidecar = sidecar_container()
    assert sidecar["restartPolicy"] == "Always"
    assert "readinessProbe" not in sidecar
    for kind in ("startupProbe", "livenessProbe"):
        route = ROUTES[probe_path(kind)]
        assert route.handler == "livez" and route.probe
