"""The Containerfile that builds the image conf/kubernetes names, checked as a file (no container
runtime in the test run): a build stage with a JDK makes the wheel with `python -m build` from the
sources the wheel is made of; the runtime stage, a slim Python with a Java 17 runtime and no JDK,
copies and installs that wheel with the extras the sidecar and Spark need, runs as a user not
root, and starts `retention` on the configuration path, port and user the manifests give it."""

from __future__ import annotations

import json
import re
import shlex
import tomllib

import yaml

from retention.cli import build_parser
from wheel_helpers import ROOT

CONTAINERFILE = ROOT / "Containerfile"
MANIFESTS = sorted((ROOT / "conf" / "kubernetes").glob("*.yaml"))


def stages() -> list[list[tuple[str, str]]]:
    """Each stage's instructions, (KEYWORD, arguments), continuation lines joined."""
    text = re.sub(r"\\\n", " ", CONTAINERFILE.read_text())
    out: list[list[tuple[str, str]]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        if keyword.upper() == "FROM":
            out.append([])
        out[-1].append((keyword.upper(), rest.strip()))
    return out


def one(stage: list[tuple[str, str]], keyword: str) -> str:
    (found,) = [rest for k, rest in stage if k == keyword]
    return found


def runs(stage: list[tuple[str, str]]) -> str:
    return "\n".join(rest for k, rest in stage if k == "RUN")


def sidecars() -> list[tuple[dict, dict, dict]]:
    """(the pod spec, the `retention` container, the Secrets by name) of each manifest."""
    found = []
    for path in MANIFESTS:
        documents = list(yaml.safe_load_all(path.read_text()))
        secrets = {d["metadata"]["name"]: d for d in documents if d["kind"] == "Secret"}
        for document in documents:
            spec = document.get("spec", {})
            spec = spec.get("template", {}).get("spec", spec)
            for container in spec.get("initContainers", []) + spec.get("containers", []):
                if container["name"] == "retention":
                    found.append((spec, container, secrets))
    assert len(found) == len(MANIFESTS) == 2
    return found


def test_a_build_stage_with_a_jdk_builds_the_wheel_from_the_sources_it_is_made_of():
    build, _ = stages()
    assert re.fullmatch(r"docker\.io/library/python:3\.\d+-slim-bookworm AS build", one(build, "FROM"))
    assert "openjdk-17-jdk-headless" in runs(build)
    assert "python -m build --outdir /dist ." in runs(build)
    assert "commitlog/spark/jars/commitlog-spark.jar" in runs(build)    # a wheel without the jar fails the build
    copied = {name.rstrip("/") for k, rest in build if k == "COPY" for name in shlex.split(rest)[:-1]
              if not name.startswith("--")}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    backend = project["build-system"]["backend-path"]
    needed = {"pyproject.toml", "README.md", "MANIFEST.in", "jvm", *packages, *backend}
    assert needed <= copied, needed - copied
    assert "." not in copied                             # nothing of a working tree (.venv, build/, a jar)


def test_the_runtime_stage_installs_the_wheel_on_a_slim_python_with_a_java_runtime_alone():
    build, runtime = stages()
    base = one(runtime, "FROM")
    assert base == one(build, "FROM").removesuffix(" AS build") and "slim" in base
    python = tuple(int(n) for n in re.search(r"python:(\d+)\.(\d+)", base).groups())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert python >= tuple(int(n) for n in re.search(r">=(\d+)\.(\d+)", project["requires-python"]).groups())
    assert "openjdk-17-jre-headless" in runs(runtime) and "-jdk" not in runs(runtime)
    assert one(runtime, "COPY") == "--from=build /dist/ /tmp/dist/"
    installed = re.search(r'pip install --no-cache-dir "\$\(ls /tmp/dist/commitlog_retention-\*\.whl\)\[([\w,]+)\]"',
                          runs(runtime))
    assert installed and set(installed.group(1).split(",")) == {"spark", "archive"}
    assert set(installed.group(1).split(",")) <= set(project["optional-dependencies"])


def test_it_runs_retention_serve_as_the_manifests_do_on_their_port_path_and_user():
    _, runtime = stages()
    entrypoint, command = json.loads(one(runtime, "ENTRYPOINT")), json.loads(one(runtime, "CMD"))
    assert entrypoint == ["retention"]
    build_parser().parse_args(command)                   # exits 2 on an unknown command or option
    uid = one(runtime, "USER").split(":")[0]
    assert uid.isdigit() and int(uid) != 0
    for spec, container, secrets in sidecars():
        assert container["image"] == "registry.example.com/commitlog-retention:0.1.0"
        assert container["args"] == command                # the kubelet runs ENTRYPOINT + args
        assert [p["containerPort"] for p in container["ports"]] == [int(one(runtime, "EXPOSE"))]
        config = command[command.index("--config") + 1]
        mount = next(m for m in container["volumeMounts"] if config.startswith(m["mountPath"] + "/"))
        volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
        assert mount.get("readOnly") is True
        secret = secrets[volume["secret"]["secretName"]]
        assert config.removeprefix(mount["mountPath"] + "/") in secret["stringData"]
    pod_spec = next(spec for spec, _, _ in sidecars() if "initContainers" in spec)
    assert pod_spec["securityContext"]["runAsUser"] == int(uid)       # the Pod's user is the image's


def test_the_documented_build_command_tags_the_image_the_manifests_name():
    text = (ROOT / "docs" / "operations.md").read_text()
    assert "## Building the image" in text
    section = text.split("## Building the image", 1)[1].split("\n## ", 1)[0]
    image = sidecars()[0][1]["image"]
    assert f"podman build -t {image} -f Containerfile ." in section
