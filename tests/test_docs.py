"""The documentation: the site builds strictly with every generated reference complete, the README
fits a screen and its examples run, the getting-started tutorial and the command-line page's
examples run as written, `make run` serves the demo, and nothing shipped cites a document outside
the repository."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from commitlog import CommitLog
from policies.config import BudgetConfig, BudgetLogConfig, LogConfig, PolicyConfig, ServiceConfig
from policies.reasons import REASONS
from policies.triggers import TRIGGERS
from retention.cli import EXIT_CODES, build_parser
from retention.scheduling import problems

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
BIN = Path(sys.executable).parent
FENCE = re.compile(r'^```(\w+)(?: title="([^"]+)")?\n(.*?)^```$', re.S | re.M)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def blocks(text: str) -> list[tuple[str, str | None, str]]:
    """(language, title, body) of every fenced block, in order."""
    return [(m.group(1), m.group(2), m.group(3)) for m in FENCE.finditer(text)]


def shell_lines(body: str) -> list[str]:
    """The commands of a shell block, each without its trailing comment."""
    out = []
    for line in body.splitlines():
        command = re.sub(r"\s+#\s.*$", "", line).strip()
        if command and not command.startswith("#"):
            out.append(command)
    return out


def wait_ready(url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"{url} was not ready within {timeout}s")


def run_line(line: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    done = subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"{line!r} exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    assert "None" not in done.stdout, f"{line!r} printed None:\n{done.stdout[-2000:]}"
    return done


@pytest.fixture
def shell_env(tmp_path):
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "HOME": str(tmp_path)}


# --- the site --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-4000:]
    return out


def page(site: Path, name: str) -> str:
    return (site / f"{name}.html").read_text()


def test_the_built_site_works_from_the_file_system(site):
    """Opened as file://build/site/index.html: every link of every page names a file that exists (no
    directory listing), search needs no server, and nothing is fetched from a font host."""
    pages = sorted(set(site.glob("*.html")) - {site / "404.html"})   # a server's page, absolute links
    nav = set(re.findall(r'class="md-nav__link[^"]*"[^>]*href="([^"#]*)"|href="([^"#]*)"[^>]*class="md-nav__link',
                         (site / "index.html").read_text()))
    nav = {a or b for a, b in nav} - {""}
    assert len(nav) >= 15 and all(link.endswith(".html") for link in nav), nav
    for html in pages:
        text = html.read_text()
        assert "fonts.googleapis.com" not in text and "fonts.gstatic.com" not in text, html.name
        for link in re.findall(r'(?:href|src)="([^"#?]*)', text):
            if not link or re.match(r"[a-z]+:", link):
                continue
            target = (html.parent / link).resolve()
            assert target.is_file(), f"{html.name} links {link!r}, not a file of the site"
    assert (site / "search" / "search_index.js").is_file()     # the offline plugin: search under file://


def _field_paths(model, prefix: str) -> list[str]:
    paths = []
    for name, field in model.model_fields.items():
        if isinstance(field.annotation, type) and hasattr(field.annotation, "model_fields"):
            paths += _field_paths(field.annotation, f"{prefix}{name}.")
        else:
            paths.append(prefix + name)
    return paths


def test_the_configuration_reference_has_every_field_with_its_default(site):
    html = page(site, "configuration")
    paths = (_field_paths(ServiceConfig, "service.") + _field_paths(LogConfig, "logs.NAME.")
             + _field_paths(PolicyConfig, "policies.NAME.") + _field_paths(BudgetConfig, "budgets.NAME.")
             + _field_paths(BudgetLogConfig, "budgets.NAME.logs.LOG."))
    assert len(paths) > 40
    for path in paths:
        assert f"<code>{path}</code>" in html, path
    row = re.search(r"<code>policies.NAME.reserve</code></td>\s*<td>(.*?)</td>\s*<td>(.*?)</td>", html, re.S)
    assert row and "duration" in row.group(1) and "3d" in row.group(2)   # 72h, written canonically


def test_the_cli_reference_has_every_subcommand_option_and_exit_code(site):
    html = page(site, "cli")
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    for name, sub in commands.items():
        assert f"retention {name}</code>" in html, name
        assert sub.description.split(":")[0] in html
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue   # -h is every command's; the page leaves it out
            for flag in action.option_strings:
                assert f"<code>{flag}</code>" in html, (name, flag)
    for code in EXIT_CODES:
        assert f"<code>{code}</code>" in html


def test_troubleshooting_explains_every_reason_trigger_problem_and_error(site):
    html = page(site, "troubleshooting")
    for code in [*REASONS, *TRIGGERS]:
        assert f"<code>{code}</code>" in html, code
    kinds = [value for name, value in vars(problems).items() if name.isupper() and isinstance(value, str)
             and re.fullmatch(r"[a-z]+(-[a-z]+)+", value)]
    assert len(kinds) >= 7
    for kind in kinds:
        assert f"<code>{kind}</code>" in html, kind
    errors = set(error_tree()) - {"ValueError", "RuntimeError"}
    assert len(errors) >= 25
    for error in errors:
        assert f"<code>{error}</code>" in html, error


def error_tree() -> dict[str, str]:
    """The error tree drawn in docs/concepts.md ("Errors"): each error's parent, by name."""
    text = (DOCS / "concepts.md").read_text().split("## Errors", 1)[1]
    tree = text.split("```")[1]
    parents: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for line in tree.splitlines():
        found = re.search(r"[└├]── (\w+)", line)
        if found is None:
            if line.strip() == "Exception":
                stack = [(-1, "Exception")]
            continue
        depth = found.start()
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parents[found.group(1)] = stack[-1][1]
        stack.append((depth, found.group(1)))
    return parents


def test_the_error_tree_draws_every_error_the_packages_declare_under_its_real_base():
    import commitlog.errors
    import commitlog.spark.staging_errors
    import policies.config.fields
    import retention.scheduling.manual
    declared = {value for module in (commitlog.errors, commitlog.spark.staging_errors, policies.config.fields,
                                     retention.scheduling.manual)
                for value in vars(module).values()
                if isinstance(value, type) and issubclass(value, Exception) and value.__module__ == module.__name__}
    parents = error_tree()
    assert {error.__name__ for error in declared} <= set(parents), set(parents) ^ {e.__name__ for e in declared}
    for error in declared:
        assert parents[error.__name__] == error.__bases__[0].__name__, error


def test_the_health_table_says_what_the_probes_do_as_the_code_decides():
    text = (DOCS / "operations.md").read_text()
    rows = {line.split("`")[1]: line.rsplit("|", 2)[-2] for line in text.splitlines()
            if line.startswith("| `") and line.count("|") == 5}
    assert set(rows) == set(problems.KINDS)
    for kind, probes in rows.items():
        restarts = "restart the sidecar: `/livez` 503" in probes
        warns = "a warning (`/healthz` 200" in probes
        assert restarts == (kind in problems.RESTART_HELPS), kind
        assert warns == (kind in problems.WARNINGS), kind
        assert restarts or "`/livez` 200" in probes, kind


def test_the_python_api_page_renders_the_docstrings(site):
    html = page(site, "python-api")
    first_line = CommitLog.open.__doc__.strip().splitlines()[0]
    assert re.split(r"`", first_line)[0].strip() in html    # its first words, up to the first code span
    assert "offset_for_time" in html and "RetentionScheduler" in html
    for inherited in ("mark_dead", "dead_bytes"):        # DeadRecords' members, shown on CommitLog
        assert f'id="commitlog.CommitLog.{inherited}"' in html, inherited
    assert 'id="commitlog.LogOptions"' in html           # what open()'s docstring points at


def png_text(data: bytes) -> dict[str, str]:
    """The tEXt chunks of a PNG, key -> text."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    text, at = {}, 8
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        if kind == b"tEXt":
            key, _, value = data[at + 8:at + 8 + length].partition(b"\0")
            text[key.decode("latin-1")] = value.decode("latin-1")
        at += 12 + length
    return text


def test_the_status_page_screenshot_is_of_the_demo_the_documentation_describes(site):
    shot = site / "assets" / "status-page.png"
    assert shot.stat().st_size > 20_000
    # Taken by scripts/screenshot_demo from `retention serve --demo` (getting-started.md), not a test run.
    source = png_text(shot.read_bytes()).get("Source", "")
    assert source.startswith("retention serve --demo, in an empty directory") and "scripts/screenshot_demo" in source, source
    assert "![The status page of the demo](assets/status-page.png)" in (DOCS / "getting-started.md").read_text()
    assert "scripts/screenshot_demo" in (DOCS / "development.md").read_text()


# --- the README ------------------------------------------------------------------------------------


def test_the_readme_fits_a_screen_and_links_only_inside_the_repository():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 150
    for target in re.findall(r"\]\(([^)#]+)", text):
        if not target.startswith("http"):
            assert (ROOT / target).exists(), target


def test_nothing_shipped_points_outside_the_repository():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    if not tracked:
        pytest.skip("not a git checkout: the shipped files cannot be listed")
    # Spelled in pieces, so this file is not itself a citation.
    outside = ("DESIGN" + ".md", ".." + "/shared")
    for name in tracked:
        if name.endswith((".png", ".json")):
            continue
        text = (ROOT / name).read_text(errors="replace")
        assert not any(cite in text for cite in outside), name


def test_the_readme_examples_run(tmp_path, shell_env):
    found = blocks((ROOT / "README.md").read_text())
    python = [body for lang, _, body in found if lang == "python" and "commitlog.spark" not in body]
    config = next(body for lang, _, body in found if lang == "yaml")
    port = free_port()
    (tmp_path / "retention.yaml").write_text(config.replace("9464", str(port)))
    for body in python:
        done = subprocess.run([sys.executable, "-c", body], cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
    commands = [line for lang, _, body in found if lang == "sh" for line in shell_lines(body)
                if line.startswith("retention ")]
    assert len(commands) == 3
    for line in commands:
        if line.startswith("retention serve"):
            server = subprocess.Popen(shlex.split(line), cwd=tmp_path, env=shell_env, start_new_session=True,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                wait_ready(f"http://127.0.0.1:{port}")
            finally:
                os.killpg(server.pid, signal.SIGTERM)
                assert server.wait(30) == 0
        else:
            run_line(line, tmp_path, shell_env)


@pytest.mark.spark
def test_the_readme_spark_block_runs_as_pasted(tmp_path):
    """The Spark block in a fresh interpreter: it starts its own session and sets PYSPARK_PYTHON."""
    found = blocks((ROOT / "README.md").read_text())
    body = next(body for lang, _, body in found if lang == "python" and "commitlog.spark" in body)
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    done = subprocess.run([sys.executable, "-c", body], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.strip().splitlines()[-1] == "1000"
    assert (tmp_path / "data" / "events" / "meta.json").is_file()


def test_make_run_serves_the_demo():
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", 9464)) == 0:
            pytest.skip("port 9464, which make run listens on, is in use by another process")
    server = subprocess.Popen(["make", "-s", "run"], cwd=ROOT, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_ready("http://127.0.0.1:9464")
        with urllib.request.urlopen("http://127.0.0.1:9464/status", timeout=10) as answer:
            status = json.load(answer)
        assert {log["name"] for log in status["logs"]} == {"staging", "demo"}
        assert status["healthy"] is True
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(30)
    said = server.stderr.read()
    # A clean start and stop says nothing alarming (the default's staging log not created yet is
    # normal, a requested stop is no fault) and names the demo's configuration where it is.
    assert "| WARNING |" not in said and "| ERROR |" not in said, said
    assert "retention/conf/demo.yaml" in said         # (a stop line comes only if a health check ticks)


# --- the getting-started tutorial and the command-line page, as written ------------------------------


def test_getting_started_and_the_cli_examples_run_as_written(tmp_path, shell_env):
    """Every block after "Clean your own log": files written, commands run in order (a line ending
    in `&` started in the background), with the sidecar's port swapped for a free one. Then the
    command-line page's examples: those asking the sidecar while it runs, the others after."""
    text = (DOCS / "getting-started.md").read_text()
    tutorial = blocks(text[text.index("## Clean your own log"):])
    port = str(free_port())
    cli_lines = [line.replace("9464", port) for lang, _, body in blocks((DOCS / "cli.md").read_text())
                 if lang == "sh" for line in shell_lines(body)]
    assert len(cli_lines) >= 10
    server = None
    try:
        for lang, title, body in tutorial:
            body = body.replace("9464", port)
            if title:
                (tmp_path / title).write_text(body)
                continue
            assert lang == "sh", (lang, body)
            for line in shell_lines(body):
                if line.endswith("&"):
                    server = subprocess.Popen(["bash", "-c", f"exec {line[:-1]}"], cwd=tmp_path, env=shell_env,
                                              start_new_session=True, stdout=subprocess.DEVNULL,
                                              stderr=subprocess.DEVNULL)   # not waited for: the page's
                                                                            # next line must (status --wait)
                else:
                    run_line(line, tmp_path, shell_env)
        with CommitLog.open(tmp_path / "data" / "app", readonly=True) as log:
            assert len(log.segments()) == 1                 # every sealed segment went
        audited = [json.loads(line) for line in (tmp_path / "data" / "audit.jsonl").read_text().splitlines()]
        assert sum(1 for line in audited if line.get("event") == "deleted") == 6
        for line in cli_lines:
            if "--url" in line:
                run_line(line, tmp_path, shell_env)
    finally:
        if server is not None:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(30)
    for line in cli_lines:
        if "--url" not in line and not line.startswith("retention serve"):
            run_line(line, tmp_path, shell_env)
    serve = next(line for line in cli_lines if line.startswith("retention serve"))
    assert serve == "retention serve --config retention.yaml"   # what the tutorial ran


def test_the_kubernetes_manifest_is_valid_and_probes_the_health_endpoints(tmp_path):
    documents = list(yaml.safe_load_all((ROOT / "conf" / "kubernetes" / "sidecar.yaml").read_text()))
    secret = next(d for d in documents if d["kind"] == "Secret")
    pod = next(d for d in documents if d["kind"] == "Pod")
    config = tmp_path / "retention.yaml"
    config.write_text(secret["stringData"]["retention.yaml"])
    done = subprocess.run([sys.executable, "-m", "retention.cli", "check", "--config", str(config)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    # The native sidecar form: an init container that keeps running, probed on /livez only.
    sidecar = next(c for c in pod["spec"]["initContainers"] if c["name"] == "retention")
    assert sidecar["restartPolicy"] == "Always"
    assert sidecar["livenessProbe"]["httpGet"]["path"] == sidecar["startupProbe"]["httpGet"]["path"] == "/livez"
    assert "readinessProbe" not in sidecar
    listen = yaml.safe_load(config.read_text())["service"]["listen"]
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == listen.rsplit(":", 1)[1]
    assert sidecar["ports"][0]["containerPort"] == int(listen.rsplit(":", 1)[1])


def test_every_retention_command_in_the_documentation_parses():
    parser = build_parser()
    found = 0
    for path in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        for lang, _, body in blocks(path.read_text()):
            if lang != "sh":
                continue
            for line in shell_lines(body):
                if line.startswith("retention "):
                    found += 1
                    parser.parse_args(shlex.split(line.rstrip("&"))[1:])   # exits 2 on an unknown option
    assert found >= 20
