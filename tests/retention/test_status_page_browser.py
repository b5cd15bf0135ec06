"""The status page in a real headless Chromium (Debian's chromium + chromium-driver, through
Selenium): it loads with no console error, shows each log and its segment count, refreshes itself
after a deletion, keeps a selected bar across refreshes, says "loading" and "cannot reach" where
data is missing, labels archived deletions, and leaves a screenshot in
build/test-artifacts/status-page.png."""

from __future__ import annotations

import json
import re
import shutil
import urllib.request
from pathlib import Path

import pytest

from commitlog import CommitLog
from retention import RetentionScheduler
from retention.web import page
from retention.web.admission import CLIENT_HEADER
from retention.web.server import RetentionHTTPServer

from retention_helpers import config_text, make_log, set_age, wait_for, write_config

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
ARTIFACTS = Path(__file__).resolve().parents[2] / "build" / "test-artifacts"

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[test]')")
if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
    pytest.skip("no headless browser: install Debian's chromium and chromium-driver (.ci/run does)",
                allow_module_level=True)


@pytest.fixture
def sidecar(tmp_path):
    """A scheduler and its HTTP server in this process, over two real logs on the tmp filesystem."""
    staging = make_log(tmp_path / "staging", 40)
    set_age(tmp_path / "staging", staging[:25], 3 * 3600)        # 25 expired, the rest young
    with CommitLog.open(tmp_path / "staging") as log:
        log.commit("etl", staging[30])
    make_log(tmp_path / "single", 0)                               # its active segment only
    clicks = make_log(tmp_path / "clicks", 8)
    with CommitLog.open(tmp_path / "clicks", readonly=True) as log:
        log.mark_dead(range(clicks[0], clicks[0] + 22))           # 22 of the head's 33 records dead
    _, config = write_config(tmp_path, config_text(
        tmp_path, sidecar=True, policy={"files_per_pass": 100, "retention_bytes": "1MiB"},
        logs={"staging": {"path": str(tmp_path / "staging"), "segment_size": "4KiB"},
              "clicks": {"path": str(tmp_path / "clicks"), "segment_size": "4KiB",
                         "overrides": {"retention_bytes": "2MiB", "reserve": "2h",
                                       "archive": {"url": f"file://{tmp_path}/archive"}}},
              "later": {"path": str(tmp_path / "later"), "segment_size": "4KiB"},
              "single": {"path": str(tmp_path / "single"), "segment_size": "4KiB"}}))
    scheduler = RetentionScheduler(config)
    scheduler.start()
    server = RetentionHTTPServer(scheduler, config.service)
    server.start()
    try:
        yield server, {"staging": len(staging), "clicks": len(clicks), "single": 1}, staging    # counts: the active too
    finally:
        server.stop()
        scheduler.stop()


@pytest.fixture
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1300", "--no-proxy-server"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # An explicit driver path: Selenium Manager never tries to download one.
    service = webdriver.ChromeService(executable_path=CHROMEDRIVER)
    driver = webdriver.Chrome(options=options, service=service)
    try:
        yield driver
    finally:
        driver.quit()


def segments(n: int) -> str:
    return "1 segment" if n == 1 else f"{n} segments"


def _segments_shown(driver, log: str) -> str:
    return driver.execute_script(
        "const e = document.querySelector(`[data-log='${arguments[0]}'] [data-role=segments]`);"
        "return e ? e.textContent : '';", log)


def _text(driver, selector: str) -> str:
    return driver.execute_script("const e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
                                 selector)


def test_status_page_shows_logs_refreshes_after_a_deletion_without_console_errors(sidecar, browser):
    server, counts, staging = sidecar
    browser.get(server.url + "/?refresh=500")
    assert browser.title == "retention status"
    for log, n in counts.items():
        wait_for(lambda: _segments_shown(browser, log) == segments(n), f"{log}: {segments(n)}")
    body = browser.find_element("tag name", "body").text
    assert "etl" in body                                # the consumer group table
    size = browser.find_element("css selector", "[data-log=staging] [data-role=size]").text
    assert size.endswith(" of 1.0 MiB cap"), size      # its policy's retention_bytes
    clicks_size = browser.find_element("css selector", "[data-log=clicks] [data-role=size]").text
    assert clicks_size.endswith(" of 2.0 MiB cap"), clicks_size      # its own, by an override
    policy = browser.find_element("css selector", "[data-log=clicks] [data-role=policy]").text
    assert policy.startswith("policy default (overridden: archive, reserve, retention_bytes)"), policy
    policy = browser.find_element("css selector", "[data-log=staging] [data-role=policy]").text
    assert policy.startswith("policy default ·"), policy
    assert "no deletions in the audit trail" in body
    assert len(browser.find_elements("css selector", "[data-log=staging] .strip div")) >= 3

    # Per log: its delete window, next pass and compaction; a log not created yet says so, no error.
    # (Read in one script each: the page re-renders every 500 ms, so held elements go stale.)
    schedule = _text(browser, "[data-log=staging] [data-role=schedule]")
    # The hourly pass is due an hour after start: "59mNNs", or "1h00m" when read within half a second of it.
    assert re.match(r"no delete hours \(disk and manual triggers only\) · reserve 1h00m · next pass in (59m[0-5]\ds|1h00m)",
                    schedule), schedule
    compaction = _text(browser, "[data-log=clicks] [data-role=compaction]")
    assert compaction.startswith("compaction: live ") and "rewrites segments below 50.0 %" in compaction, compaction
    # Its archive tier: what the manifest lists once the first upload run is done, nothing waiting.
    archive = wait_for(lambda: (_text(browser, "[data-log=clicks] [data-role=archive]") or "").endswith("nothing waiting")
                    and _text(browser, "[data-log=clicks] [data-role=archive]"), "the archive line")
    assert archive.startswith("archive file://") and ": 8 segments (" in archive, archive
    assert _text(browser, "[data-log=staging] [data-role=archive]") is None      # no tier, no line
    note, boxes = browser.execute_script(
        "const l = document.querySelector('[data-log=later]');"
        "return [l.querySelector('[data-role=not-created]').textContent, l.querySelectorAll('.detail').length];")
    assert "not created yet" in note and boxes == 1                     # that note, no error box
    # The legend: a few entries in plain words, each its own colour with details in its tooltip;
    # every kind of bar the data has (retention/web/page.py) is one of them; the dark top explained too.
    legend = browser.execute_script(
        "return [...document.querySelectorAll('#legend [data-kinds]')].map(e => [e.dataset.kinds, e.dataset.color, e.title]);")
    assert len(legend) <= 8 and len({colour for _, colour, _ in legend}) == len(legend), legend
    assert all(len(tip) > 30 for _, _, tip in legend), legend
    kinds = {kind for entry, _, _ in legend for kind in entry.split()}
    assert kinds == {page.DELETE, page.EVICT, page.ACTIVE_KIND, page.HUNG_KIND, "unconsumed", "keep",
                     *page.KEEP_KINDS.values()}, kinds
    words = _text(browser, "#legend")
    assert "records no longer needed" in words and "protected: a consumer group has not read it" in words, words
    assert not re.search(r"dark top|=|files_per_pass|no-trigger", words), words
    # The disk chart: scaled to the history it has, its lines labelled (the force target is clean's).
    assert _text(browser, "[data-role=span]") == "1m00s ago"
    labels = browser.execute_script(
        "return [...document.querySelectorAll('.chartbox .lbl')].map(e => [e.textContent, e.getBoundingClientRect().toJSON()]);")
    assert [text for text, _ in labels] == ["90.0 %: writers refused", "85.0 %: forcing starts",
                                            "75.0 %: expired go at any hour, forcing stops"], labels
    rects = [rect for _, rect in labels]
    for a, b in zip(rects, rects[1:]):   # no label covers another
        apart = a["right"] <= b["left"] or b["right"] <= a["left"]
        assert apart or a["bottom"] <= b["top"] or b["bottom"] <= a["top"], (a, b)
    config = _text(browser, "#config")
    assert config.startswith("configuration in-process configuration, loaded ") and "last reload ok" in config

    # A manual pass deletes the 25 expired segments; the page picks it up on its own.
    request = urllib.request.Request(server.url + "/clean", method="POST", data=b"", headers={CLIENT_HEADER: "tests"})
    with urllib.request.urlopen(request, timeout=30) as response:
        deleted = sum(log["deleted"] for log in json.loads(response.read())["logs"])
    assert deleted == 25
    left = counts["staging"] - deleted
    wait_for(lambda: _segments_shown(browser, "staging") == segments(left), f"staging: {segments(left)}")
    newest = f"{staging[24]:020d}.log"                  # the table lists the last deletions, newest first
    wait_for(lambda: newest in browser.find_element("id", "deletions").text, "the last deletion in the table")
    assert len(browser.find_elements("css selector", "#deletions tr")) == 1 + 20
    passes = browser.find_element("id", "passes").text
    assert "manual" in passes
    # How long a pass took: milliseconds under a second, never "0s" (nor "≤ 0s" for a stretch of them).
    took = browser.execute_script("return [...document.querySelectorAll('#passes tr')].slice(1).map(r => r.lastChild.textContent);")
    assert took and all(re.fullmatch(r"(at most )?(\d+ ms|under 1 ms|\d+\.\d s)( each)?", t) for t in took), took
    assert any(t.endswith(" ms") for t in took) and "≤" not in passes, took
    assert browser.execute_script("return [took(0.04), took(0.0001), took(2.5), took(75)];") == [
        "40 ms", "under 1 ms", "2.5 s", "1m15s"]
    # One word for one, the plural for the rest, everywhere on the page.
    body = browser.find_element("tag name", "body").text
    assert _segments_shown(browser, "single") == "1 segment"
    assert "(s)" not in body and not re.search(r"(?<![\d.,])1 (segments|outputs|logs|failures)\b", body), body
    # Passes that changed nothing are one row per stretch (the page's own function, in the browser).
    rows = browser.execute_script("""return collapsePasses([
        {at: "2026-01-01T00:00:05Z", kind: "interval", logs: ["a"], outcome: "ok", deleted: 0, freed_bytes: 0, duration_seconds: 0.1},
        {at: "2026-01-01T00:00:04Z", kind: "interval", logs: ["b"], outcome: "ok", deleted: 0, freed_bytes: 0, duration_seconds: 0.3},
        {at: "2026-01-01T00:00:03Z", kind: "manual", logs: ["a"], outcome: "ok", deleted: 2, freed_bytes: 8, duration_seconds: 0.2},
        {at: "2026-01-01T00:00:02Z", kind: "interval", logs: ["a"], outcome: "ok", deleted: 0, freed_bytes: 0, duration_seconds: 0.1}])
        .map(p => [p.quiet || false, p.count || 1, p.kind || p.kinds]);""")
    assert rows == [[True, 2, "interval"], [False, 1, "manual"], [False, 1, "interval"]], rows

    # Click a bar: its details appear.
    browser.find_elements("css selector", "[data-log=staging] .strip div")[0].click()
    detail = browser.find_element("css selector", "[data-log=staging] .strip ~ .detail").text
    assert detail.startswith("staging: ") and "segment" in detail
    # Each bar says why with its figures: the kept young ones their age against reserve.
    titles = browser.execute_script(
        "return [...document.querySelectorAll('[data-log=staging] .strip div')].map(e => e.title);")
    assert any("reserved (younger than 1h" in title for title in titles), titles

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "status-page.png"
    browser.save_screenshot(str(shot))
    print(f"\nstatus page screenshot: {shot}")
    assert shot.stat().st_size > 10_000

    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    assert errors == [], errors


def test_each_bar_shows_the_live_share_of_its_segments(sidecar, browser):
    server, counts, _ = sidecar
    browser.get(server.url + "/?refresh=500")
    wait_for(lambda: _segments_shown(browser, "clicks") == f"{counts['clicks']} segments", "clicks shown")
    bars = browser.find_elements("css selector", "[data-log=clicks] .strip div")
    head = bars[0]
    dead = head.find_elements("css selector", "i.dead")
    assert len(dead) == 1
    assert abs(float(dead[0].get_attribute("data-live")) - 11 / 33) < 0.001
    # The dark top of the bar is the dead share: two thirds of its height.
    ratio = browser.execute_script("return arguments[0].getBoundingClientRect().height / "
                                   "arguments[1].getBoundingClientRect().height;", dead[0], head)
    assert abs(ratio - 22 / 33) < 0.05, ratio
    assert "live 33.3 %" in head.get_attribute("title")
    # A segment with nothing dead has no dark part, and says it is all live.
    assert bars[-1].find_elements("css selector", "i.dead") == []
    assert "live 100.0 %" in bars[-1].get_attribute("title")
    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    assert errors == [], errors


def test_a_health_problem_gets_a_row_on_the_page_until_it_clears(sidecar, browser):
    server, counts, _ = sidecar
    browser.get(server.url + "/?refresh=500")
    wait_for(lambda: _segments_shown(browser, "staging") == f"{counts['staging']} segments", "the page loaded")
    assert not browser.find_element("id", "healthbox").is_displayed()
    server.scheduler.reload_failed("retention.yaml:7: policies.default.interval: must be positive")
    wait_for(lambda: browser.find_element("id", "healthbox").is_displayed(), "the health problems section")
    row = browser.find_element("css selector", "#problems tr")
    assert "reload-failed" in row.text and "policies.default.interval" in row.text
    # A warning: the older configuration still cleans, so amber, not UNHEALTHY.
    assert "b-warn" in row.find_element("css selector", ".badge").get_attribute("class")
    assert browser.find_element("id", "health").text == "healthy, with a warning"
    wait_for(lambda: "last reload FAILED" in _text(browser, "#config"), "the failed reload said")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "status-page-problem.png"))
    server.scheduler.reload(server.scheduler.config)          # a good reload clears it
    wait_for(lambda: not browser.find_element("id", "healthbox").is_displayed(), "the section hidden again")
    assert browser.find_element("id", "health").text == "healthy"
    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    assert errors == [], errors


def _renders(driver) -> int:
    return int(driver.execute_script("return document.body.dataset.renders || 0;"))


def _after_renders(driver, n: int) -> None:
    """Wait until the page has rendered fresh data `n` more times."""
    start = _renders(driver)
    wait_for(lambda: _renders(driver) >= start + n, f"{n} refreshes of the page")


def _selection(driver) -> tuple[str | None, str | None, list[str]]:
    """The selection's detail text and state, and the first segments of the bars drawn selected."""
    return tuple(driver.execute_script(
        "const d = document.querySelector('[data-role=selection]');"
        "return [d && d.firstChild.textContent, d && d.dataset.state,"
        "        [...document.querySelectorAll('.strip div.sel')].map(b => b.dataset.first)];"))


def _click_bar(driver, log: str, first: str) -> None:
    driver.execute_script("document.querySelector(`[data-log='${arguments[0]}'] .strip div[data-first='${arguments[1]}']`).click();",
                          log, first)


def _clean(server) -> int:
    request = urllib.request.Request(server.url + "/clean", method="POST", data=b"", headers={CLIENT_HEADER: "tests"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return sum(log["deleted"] for log in json.loads(response.read())["logs"])


def test_a_selected_bar_keeps_its_details_across_refreshes_until_dismissed_and_says_when_it_is_gone(sidecar, browser):
    server, counts, staging = sidecar
    browser.get(server.url + "/?refresh=500")
    wait_for(lambda: _segments_shown(browser, "staging") == segments(counts["staging"]), "the page loaded")
    young, expired = f"{staging[25]:020d}.log", f"{staging[0]:020d}.log"
    _click_bar(browser, "staging", young)
    text, state, selected = _selection(browser)
    assert text.startswith("staging: ") and young in text and state == "run" and selected == [young], (text, selected)
    which = text.split(": keep")[0]                      # its segments (the ages in the rest move on)
    _after_renders(browser, 3)                          # the refreshes redraw the page, not the selection
    text, state, selected = _selection(browser)
    assert text.split(": keep")[0] == which and state == "run" and selected == [young], (text, which)
    # Another bar moves the selection there (one at a time); a deletion of its segment is said.
    _click_bar(browser, "staging", expired)
    assert _selection(browser)[2] == [expired]
    assert _clean(server) == 25
    text, state, selected = wait_for(lambda: _selection(browser)[1] == "gone" and _selection(browser), "the selection gone")
    assert text == f"{expired}, the segment you selected, is gone: it is no longer in the log (deleted or compacted away)"
    assert selected == []                               # (older than the 20 deletions the table lists)
    newest = f"{staging[24]:020d}.log"                  # one the table lists: when it went
    browser.execute_script("select({log: 'staging', segment: arguments[0]});", newest)
    text = _selection(browser)[0]
    assert re.fullmatch(rf"{newest}, the segment you selected, is gone: deleted \d+s ago; see Last deletions", text), text
    _after_renders(browser, 2)
    assert _selection(browser)[1] == "gone"              # still said, until the user dismisses it
    browser.find_element("css selector", "[data-role=selection] button").click()
    assert _selection(browser) == (None, None, [])
    _after_renders(browser, 2)
    assert _selection(browser) == (None, None, []) and "click a bar for details" in _text(browser, "[data-log=staging]")
    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    assert errors == [], errors


def test_the_page_says_loading_before_its_first_data_and_when_the_sidecar_cannot_be_reached(sidecar, browser):
    server, counts, _ = sidecar
    with urllib.request.urlopen(server.url + "/", timeout=10) as answer:
        html = answer.read().decode()
    for panel in ("filesystems", "logs", "groups", "pinned", "deletions", "passes"):   # before any fetch
        assert re.search(rf'<div id="{panel}"><p [^>]*data-role="loading">loading…</p></div>', html), panel
    browser.execute_cdp_cmd("Network.enable", {})
    browser.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["*/ui/data*"]})       # as if the sidecar were down
    browser.get(server.url + "/?refresh=500")
    wait_for(lambda: "no data yet: the sidecar cannot be reached" in (_text(browser, "#logs") or ""), "the logs panel says so")
    assert _text(browser, "#err").startswith(f"cannot reach the sidecar at {server.url.split('//')[1]} (")
    assert "retrying every 500 ms" in _text(browser, "#err") and _text(browser, "#health") == "unreachable"
    assert "no data yet" in _text(browser, "#deletions")
    browser.execute_cdp_cmd("Network.setBlockedURLs", {"urls": []})                   # back
    wait_for(lambda: _segments_shown(browser, "staging") == segments(counts["staging"]), "the data")
    assert _text(browser, "#err") == "" and _text(browser, "#health") == "healthy"
    browser.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["*/ui/data*"]})       # gone again: the data kept, said old
    wait_for(lambda: "the page shows its answer of" in _text(browser, "#err"), "stale data said")
    assert _segments_shown(browser, "staging") == segments(counts["staging"])


def test_a_deletion_of_an_archived_segment_says_nothing_was_lost(sidecar, browser, tmp_path):
    server, counts, staging = sidecar
    browser.get(server.url + "/?refresh=500")
    assert _clean(server) == 25                        # staging's expired ones first: clicks' are the newest below
    wait_for(lambda: (_text(browser, "[data-log=clicks] [data-role=archive]") or "").endswith("nothing waiting"),
             "clicks archived")
    with CommitLog.open(tmp_path / "clicks", readonly=True) as log:
        sealed = [s.base_offset for s in log.segments()][:-1]
    set_age(tmp_path / "clicks", sealed, 3 * 3600)      # older than its 2 h reserve, and in the archive
    assert _clean(server) == len(sealed)
    rows = wait_for(lambda: [row for row in browser.find_element("id", "deletions").text.splitlines() if " clicks " in row],
                    "clicks' deletions in the table")
    assert all(row.endswith("manual; archived first: nothing lost") for row in rows), rows
    staging_rows = [row for row in browser.find_element("id", "deletions").text.splitlines() if " staging " in row]
    assert staging_rows and not any("archived" in row for row in staging_rows), staging_rows   # no tier, not said


@pytest.fixture
def budget_sidecar(tmp_path):
    """A scheduler and its server over logs a (9 segments and the active one), b (8) and c (5) in a
    budget of 16 segments with weights 2:1:1; consumer group etl has read c's first segment only."""
    bases = {"a": make_log(tmp_path / "a", 9), "b": make_log(tmp_path / "b", 8), "c": make_log(tmp_path / "c", 5)}
    with CommitLog.open(tmp_path / "c") as log:
        log.commit("etl", bases["c"][1])
    body = config_text(tmp_path, sidecar=True, logs={n: {"path": str(tmp_path / n), "segment_size": "4KiB"}
                                                     for n in "abc"})
    body += "budgets:\n  shared:\n    bytes: 64KiB\n    logs: {a: {weight: 2}, b: {}, c: {}}\n"
    _, config = write_config(tmp_path, body)
    scheduler = RetentionScheduler(config)
    scheduler.start()
    server = RetentionHTTPServer(scheduler, config.service)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        scheduler.stop()


def test_status_page_shows_each_budget_its_use_and_each_logs_share(budget_sidecar, browser):
    browser.get(budget_sidecar.url + "/?refresh=500")
    # The first pass takes a and b down to their shares; c keeps what etl has not read: 68 KiB of 64.
    head = wait_for(lambda: "68.0 KiB of 64.0 KiB" in (_text(browser, "[data-budget=shared]") or "")
                    and _text(browser, "[data-budget=shared] > div"), "the budget's use after the first pass")
    assert head == "shared 68.0 KiB of 64.0 KiB over", head
    assert browser.execute_script("return document.getElementById('budgetbox').hidden;") is False
    rows = browser.execute_script(
        "return [...document.querySelectorAll('[data-budget=shared] tr')].slice(1)"
        ".map(r => [...r.children].map(c => c.textContent));")
    assert rows == [["a", "2", "0 B", "32.0 KiB", "32.0 KiB", "within"],
                    ["b", "1", "0 B", "16.0 KiB", "16.0 KiB", "within"],
                    ["c", "1", "0 B", "16.0 KiB", "20.0 KiB", "above by 4.0 KiB"]], rows
    # The last deletions say why, with the figures: the budget overrode their age.
    deletions = wait_for(lambda: "budget override (log " in browser.find_element("id", "deletions").text
                         and browser.find_element("id", "deletions").text, "budget deletions in the table")
    assert "share 16.0KiB; budget shared 64.0KiB" in deletions, deletions
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == [], errors
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "status-page-budgets.png"))
