"""The `retention` command: serve, plan, clean, compact, offsets, archive, clock, check, status.

`plan`, `clean`, `compact` and `offsets` work on a configuration file (`--config`, or the embedded
default) or ask a running sidecar (`--url`); either way `--json` prints the JSON the sidecar's HTTP
API gives, and every output names the configuration it used. Exit statuses: `EXIT_CODES`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import urllib.parse
from datetime import datetime

from loguru import logger

from policies import ConfigError, RetentionConfig

from .lookup import UnknownLogError, offsets_at, parse_time, render_offsets
from .service.client import (DEFAULT_URL, SidecarRefused, SidecarUnreachable, call_sidecar, normalize_url,
                             sidecar_listening)
from .service.embedded import EXIT_CODES, EXIT_FAILED, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE, load
from .service.logsetup import configure_logging

__all__ = ["EXIT_CODES", "build_parser", "main"]

EMBEDDED = "embedded default (retention/conf/retention.yaml)"
TOKEN_ENV = "RETENTION_TOKEN"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, as for a bad configuration
        self.exit(EXIT_USAGE, f"retention: error: {message}\n")


def _seconds(text: str) -> float:
    """A non-negative number of seconds, for argparse (its error is one line, exit 2)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds, 0 or more, not {text!r}")
    return value


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("commitlog-retention")
    except PackageNotFoundError:   # run from a source tree that was never installed
        return "unknown (not installed)"


def _command(sub, name: str, summary: str, description: str, *, source: bool = True, remote: bool = False,
             posts: bool = False, as_json: str | None = "print the JSON object the HTTP API gives instead of text"):
    parser = sub.add_parser(name, help=summary, description=description)
    if source:
        parser.add_argument("--config", metavar="FILE",
                            help="the YAML configuration (default: the embedded one, data under ./data)")
    if remote:
        parser.add_argument("--url", metavar="URL", help="ask the sidecar at URL (HOST:PORT or http://HOST:PORT) "
                            "instead of reading a configuration; it runs its own")
    if posts:   # read from the environment at use, so no token is ever shown as a default
        parser.add_argument("--token", metavar="TOKEN",
                            help=f"the sidecar's service.token, with --url (default: ${TOKEN_ENV}; clock accept "
                                 "without --url: else the configuration's)")
    if as_json:
        parser.add_argument("--json", action="store_true", help=as_json)
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="retention", description="Retention scheduler for segmented commit logs: deletes "
                     "expired segments, relieves disk pressure, compacts dead records, and says why.",
                     epilog="Exit status: " + "; ".join(f"{code} {text.split(':')[0].split(' (')[0]}"
                                                         for code, text in EXIT_CODES.items()) + ".")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}",
                        help="print the installed version and exit")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser, metavar="COMMAND")
    _add_serve(sub)
    _add_pass_commands(sub)
    _add_operator_commands(sub)
    return parser


def _add_serve(sub) -> None:
    """The long-running sidecar."""
    serve = _command(sub, "serve", "run the long-running sidecar",
                     "Run the sidecar until SIGTERM or SIGINT: a cleanup pass per policy every interval, a disk "
                     "check every second, compaction, HTTP (health, metrics, status page) on service.listen. "
                     "SIGHUP re-reads the configuration.", as_json=None)
    serve.add_argument("--demo", action="store_true",
                       help="also append a slow stream of records into a demo log (./data/demo, 1 MiB "
                       "segments, a one-minute reserve) to watch segments roll, expire and go")


def _add_pass_commands(sub) -> None:
    """What a pass would do or does now: plan, clean, compact, offsets."""
    plan = _command(sub, "plan", "what a pass would do now, and why",
                    "Print what a cleanup pass would do now with every segment of every log, and why, with "
                    "the figures behind each reason. Changes nothing.", remote=True)
    plan.add_argument("--at", metavar="TIME", help="plan as if it were TIME (ISO 8601; naive: local time); "
                      "not with --url")
    clean = _command(sub, "clean", "run one cleanup pass now",
                     "Run one cleanup pass now, as a manual trigger (expired segments go at any hour), and "
                     "print what it did; nothing stays open after it. A log a running sidecar owns is left to "
                     "it: use --url, and that sidecar opens a manual trigger for its policies' manual_passes "
                     "passes (the first runs now, the rest at its next intervals) and prints the first.",
                     remote=True, posts=True)
    clean.add_argument("--force", action="store_true",
                       help="also delete segments younger than reserve (never unconsumed ones)")
    compact = _command(sub, "compact", "run one compaction pass now",
                       "Run one compaction pass now: rewrite sealed segments whose live share is below "
                       "compaction.max_live_ratio without their dead records.", remote=True, posts=True)
    compact.add_argument("--dry-run", action="store_true", help="print what it would do; nothing is changed")
    offsets = _command(sub, "offsets", "each log's first offset written at or after a time",
                       "Print, per log, the first offset whose record was written at or after TIME, with the "
                       "log's start and end offsets (Kafka's offsetsForTimes).", remote=True)
    offsets.add_argument("--at", required=True, metavar="TIME",
                         help="the time (ISO 8601; naive: this machine's local time)")
    offsets.add_argument("--log", action="append", default=[], metavar="NAME",
                         help="only this configured log (repeatable; default: every log)")


def _add_operator_commands(sub) -> None:
    """The operator's other commands: archive, clock, check, status."""
    archive = _command(sub, "archive", "the archive tier: status, upload, verify, forget",
                       "Work on the archive tier of every configured log that has one (archive.url): status "
                       "prints what each manifest lists and the upload lag, upload runs one upload now (a log a "
                       "running sidecar owns is left to it), verify checks every archived object's size and "
                       "SHA-256 against the manifest (exit 1 on a problem), forget (with --log) drops what this "
                       "host remembers of a tier that is gone for good (archive-missing), so the next upload "
                       "takes the tier as new and archives every local segment again.")
    archive.add_argument("action", choices=("status", "upload", "verify", "forget"), help="what to do")
    archive.add_argument("--log", action="append", default=[], metavar="NAME",
                         help="only this configured log (repeatable; default: every log with an archive)")
    clock = _command(sub, "clock", "accept the wall clock after a forward step",
                     "Accept the wall clock after a forward step (health problem clock-stepped): what only the "
                     "step would expire or make stale goes from the next pass. With --url, the sidecar there "
                     "accepts it; with --config, the sidecar listening on its service.listen does when one "
                     "answers, else this command accepts it in the audit trail and the clock record for the "
                     "next start.", remote=True, posts=True)
    clock.add_argument("action", choices=("accept",), help="what to do")
    _command(sub, "check", "validate the configuration",
             "Validate the configuration and say what it looks after; a problem is one line naming the file, "
             "line, key and reason (exit 2). Then look at its paths as the user running it (run it as the "
             "sidecar's): a log directory it may not read or an audit trail it cannot write is an error line "
             "(exit 1); a log it may read but not write, or a log path whose parent directory does not "
             "exist, a warning.",
             as_json="print each log with its overrides and the policy in force for it, and what the look "
             "at the paths found")
    status = _command(sub, "status", "ask a running sidecar how it is",
             "Print a running sidecar's status: health, policies, filesystems, and per log its segments, "
             "offsets, last pass, consumer groups, hung and pinned files.", source=False, remote=True,
             as_json="print the sidecar's GET /status JSON (or {url, error, reachable} when it cannot "
             "be reached)")
    status.add_argument("--wait", type=_seconds, default=0.0, metavar="SECONDS",
                        help="ask again until the sidecar answers and is ready (its first passes done), for up "
                        "to SECONDS (one just started); nothing answering by then exits 3")


def _check(path: str | None, config, *, as_json: bool = False) -> int:
    from .preflight import ERROR, findings
    where = path or EMBEDDED
    found = findings(config)
    status = EXIT_FAILED if any(level == ERROR for level, _ in found) else EXIT_OK
    if as_json:
        print(json.dumps({"config": where, "logs": {
            name: {"path": str(log.path), "policy": log.policy, "overrides": log.model_dump(mode="json")["overrides"],
                   "policy_in_force": config.policy_for(name).model_dump(mode="json")}
            for name, log in config.logs.items()},
            "findings": [{"level": level, "message": line} for level, line in found]}, indent=2))
        return status
    for level, line in found:
        print(f"retention: {level}: {where}: {line}", file=sys.stderr)
    if status != EXIT_OK:
        return status
    if not config.logs:
        print(f"retention: warning: {where}: logs is empty: the sidecar would look after nothing",
              file=sys.stderr)
    logs, policies = len(config.logs), len(config.defined_policies)
    builtin = sum(1 for log in config.logs.values() if log.policy not in config.defined_policies)
    print(f"{where}: ok ({logs} log{'s' if logs != 1 else ''}, {policies} "
          f"polic{'ies' if policies != 1 else 'y'}"
          + (f"; the built-in default policy looks after {builtin})" if builtin else ")"))
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """The `retention` command. SIGPIPE takes its default action while a client command runs, so
    `retention plan | head` ends quietly, and is put back on return: a caller that runs `main` in
    its own process (a test, an embedding tool) keeps its own disposition."""
    args = build_parser().parse_args(argv)
    previous = signal.getsignal(signal.SIGPIPE)
    if args.command != "serve":   # a server must outlive a client that hangs up: it keeps SIG_IGN
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        return _dispatch(args)
    finally:
        signal.signal(signal.SIGPIPE, previous)


def _dispatch(args: argparse.Namespace) -> int:
    try:
        if args.command == "status":
            from .service.client import print_status
            return print_status(normalize_url(args.url or DEFAULT_URL), as_json=args.json, wait=args.wait)
        if getattr(args, "url", None):
            return _remote(args)
        config = load(args.config)
        if args.command == "check":
            return _check(args.config, config, as_json=args.json)
        configure_logging(config.service.log_level, config.service.log_format)
        if args.command == "serve":
            from .service.serve import serve
            return serve(config, config_path=args.config, demo=args.demo)
        source = os.path.abspath(args.config) if args.config else EMBEDDED
        if args.command == "compact":
            return _compact(args, config, source)
        if args.command == "clock":
            return _accept_clock(args, config, source)
        if args.command == "archive":
            from .archiving.commands import archive_command, render
            result = archive_command(args.action, config, args.log)
            _print(args, {"config": source, **result}, render)
            return EXIT_FAILED if result["failed"] else EXIT_OK
        at = parse_time(args.at) if getattr(args, "at", None) else None
        if args.command == "offsets":
            return _print(args, {"config": source, **offsets_at(config, at, args.log)}, render_offsets)
        return _plan_or_clean(args, config, at, source)
    except ConfigError as exc:
        print(f"retention: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ValueError as exc:
        if str(exc).startswith(("--at", "--url", "--log")) or isinstance(exc, UnknownLogError):
            print(f"retention: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        raise
    except KeyboardInterrupt:
        return EXIT_FAILED


def _remote(args: argparse.Namespace) -> int:
    """`plan`, `clean`, `compact` or `offsets` answered by the sidecar at --url."""
    url = normalize_url(args.url)
    if args.config:
        raise ValueError("--url: give --config or --url, not both (a sidecar plans with its own configuration)")
    if args.command == "plan" and args.at:
        raise ValueError("--url: --at is for planning from a file; a sidecar plans at its own time")
    if args.command == "clock":
        answer = _call(args, url, "POST", "/clock/accept")
        return answer if isinstance(answer, int) else _print_clock(args, answer)
    method, path, render = {
        "plan": ("GET", "/plan", _render_pass),
        "clean": ("POST", "/clean" + ("?force=1" if getattr(args, "force", False) else ""), _render_pass),
        "compact": ("POST", "/compact" + ("?dry_run=1" if getattr(args, "dry_run", False) else ""), _render_compaction),
        "offsets": ("GET", "/offsets?" + urllib.parse.urlencode(
            [("at", getattr(args, "at", None) or "")] + [("log", name) for name in getattr(args, "log", [])]),
            render_offsets),
    }[args.command]
    answer = _call(args, url, method, path)
    return answer if isinstance(answer, int) else _print(args, answer, render)


def _call(args: argparse.Namespace, url: str, method: str, path: str, *,
          token: str | None = None) -> dict | int:
    """The sidecar's answer (labelled with its URL), or the exit status when it gives none."""
    try:
        token = getattr(args, "token", None) or os.environ.get(TOKEN_ENV) or token
        answer = call_sidecar(url, path, method=method, token=token)
    except SidecarUnreachable as exc:
        print(f"retention: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except SidecarRefused as exc:
        print(f"retention: {exc}", file=sys.stderr)
        return EXIT_USAGE if exc.code == 400 else EXIT_FAILED
    answer.setdefault("config", f"the sidecar at {url}")
    return answer


def _guard(config: RetentionConfig, *, record: bool):
    """A clock guard after its start-up look over `config`'s logs and audit trail."""
    from .audit import AuditTrail
    from .deletion.clockguard import ClockGuard, newest_time
    audit = AuditTrail(str(config.service.audit))
    guard = ClockGuard(config.service.clock_step_threshold, audit=audit, record=record)
    guard.start(newest_time([str(log.path) for log in config.logs.values()], audit.path))
    return guard


def _accept_clock(args: argparse.Namespace, config: RetentionConfig, source: str) -> int:
    """`clock accept --config`: the sidecar listening on `service.listen` accepts when one answers (its
    hold is the one passes judge by, and it rewrites the clock record); else this process does."""
    try:
        url = sidecar_listening(config.service.listen)
    except SidecarUnreachable as exc:
        print(f"retention: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    if url is None:
        return _print_clock(args, {"config": source, "clock": _guard(config, record=True).accept()})
    answer = _call(args, url, "POST", "/clock/accept", token=config.service.token)
    return answer if isinstance(answer, int) else _print_clock(args, answer)


def _print_clock(args: argparse.Namespace, data: dict) -> int:
    if args.json:
        json.dump(data, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return EXIT_OK
    clock = data["clock"]
    if clock.get("held"):
        words = (f"accepted the wall clock {clock['time']}, {clock['step_seconds']:.0f}s ahead of the trusted "
                 f"time {clock['trusted_time']}: what the step made due goes from the next pass")
    else:
        words = f"no forward clock step is held at {clock['time']}; nothing to accept"
    sys.stdout.write(f"configuration: {data['config']}\nclock: {words}\n")
    return EXIT_OK


def _render_pass(data: dict) -> str:
    from .deletion.report import render_result
    return render_result(data)


def _render_compaction(data: dict) -> str:
    from .compaction.summary import render_compaction
    return render_compaction(data)


def _failed(data: dict) -> bool:
    """A pass, compaction or lookup whose JSON reports a failure (a plan fails only to read a log)."""
    logs = data["logs"].values() if isinstance(data["logs"], dict) else data["logs"]
    return any(log.get("error") or any(f.get("action") == "failed" for f in log.get("files", ())) for log in logs)


def _print(args: argparse.Namespace, data: dict, render) -> int:
    if args.json:
        json.dump(data, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        text = render(data)
        sys.stdout.write(f"configuration: {data['config']}\n" + text + ("" if text.endswith("\n") else "\n"))
    return EXIT_FAILED if _failed(data) else EXIT_OK


def _plan_or_clean(args: argparse.Namespace, config: RetentionConfig, at: datetime | None, source: str) -> int:
    from .deletion.cleaner import Cleaner
    # At the clock's time a forward step found at start holds (`plan --at` plans at the time asked).
    cleaner = Cleaner(config, guard=None if at is not None else _guard(config, record=args.command == "clean"))

    def work():
        if args.command == "plan":
            return cleaner.plan(at)
        cleaner.trigger_manual(force=args.force, passes=1)   # one pass, this one: nothing left open
        return cleaner.run_pass()
    return _run(args, work, cleaner.close, _render_pass, source)


def _compact(args: argparse.Namespace, config: RetentionConfig, source: str) -> int:
    from .compaction.summary import render_output
    from .compaction.compactor import Compactor

    def progress(log, output):
        print(render_output(log, output, dry_run=args.dry_run), file=sys.stderr, flush=True)
    # A progress line per output on a terminal only; stdout keeps the report.
    on_output = progress if sys.stderr.isatty() else None
    compactor = Compactor(config)
    return _run(args, lambda: compactor.run(dry_run=args.dry_run, on_output=on_output), compactor.close,
                _render_compaction, source)


def _run(args: argparse.Namespace, work, close, render, source: str) -> int:
    """Run `work()`, then print its result's JSON (or `render` of it); status 1 when it raised or failed."""
    try:
        result = work()
    except Exception as exc:  # noqa: BLE001 (one line to the operator, status 1)
        logger.opt(exception=exc).debug("failed")
        print(f"retention: {args.command} failed: {exc}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        close()
    return _print(args, {"config": source, **result.to_json_dict()}, render)


if __name__ == "__main__":
    sys.exit(main())
