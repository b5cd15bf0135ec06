"""The `retention` command: serve, plan, clean, compact, offsets, check, status.

Exit status: 0 done; 2 the configuration or the command line is wrong; 1 anything else.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from datetime import datetime

from loguru import logger

from policies import ConfigError, RetentionConfig

from .lookup import UnknownLogError, offsets_at, parse_time, render_offsets
from .service.embedded import EXIT_FAILED, EXIT_OK, EXIT_USAGE, load
from .service.logsetup import configure_logging


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, as for a bad configuration
        self.exit(EXIT_USAGE, f"retention: error: {message}\n")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("commitlog-retention")
    except PackageNotFoundError:   # run from a source tree that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="retention", description="Retention scheduler for segmented commit logs.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    serve = sub.add_parser("serve", help="run the long-running sidecar")
    serve.add_argument("--config", help="YAML file (default: the embedded conf/retention.yaml)")
    serve.add_argument("--demo", action="store_true",
                       help="also append a slow stream of records into a demo log with 1 MiB segments")
    plan = sub.add_parser("plan", help="what a pass would do now, and why, for every segment")
    plan.add_argument("--config")
    plan.add_argument("--json", action="store_true")
    plan.add_argument("--at", help="plan as if it were this time (ISO 8601); planning only")
    clean = sub.add_parser("clean", help="run one pass now (a manual trigger)")
    clean.add_argument("--config")
    clean.add_argument("--json", action="store_true")
    clean.add_argument("--force", action="store_true", help="also delete segments younger than reserve")
    compact = sub.add_parser("compact", help="run one compaction pass now")
    compact.add_argument("--config")
    compact.add_argument("--json", action="store_true")
    compact.add_argument("--dry-run", action="store_true", help="what it would do; nothing is changed")
    offsets = sub.add_parser("offsets", help="the first offset of each log written at or after a time")
    offsets.add_argument("--config")
    offsets.add_argument("--json", action="store_true")
    offsets.add_argument("--at", required=True, help="the time (ISO 8601; naive: this machine's local time)")
    offsets.add_argument("--log", action="append", default=[], metavar="NAME",
                         help="only this configured log (repeatable; default: every log)")
    check = sub.add_parser("check", help="validate the configuration")
    check.add_argument("--config")
    check.add_argument("--json", action="store_true",
                       help="print each log with the policy in force for it (its overrides applied)")
    status = sub.add_parser("status", help="ask a running sidecar")
    status.add_argument("--url", default="http://127.0.0.1:9464")
    status.add_argument("--json", action="store_true")
    return parser


def _check(path: str | None, config, *, as_json: bool = False) -> int:
    where = path or "embedded default"
    if as_json:
        print(json.dumps({"config": where, "logs": {
            name: {"path": str(log.path), "policy": log.policy, "overrides": log.model_dump(mode="json")["overrides"],
                   "policy_in_force": config.policy_for(name).model_dump(mode="json")}
            for name, log in config.logs.items()}}, indent=2))
        return EXIT_OK
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
    args = build_parser().parse_args(argv)
    if args.command != "serve":   # a server must outlive a client that hangs up: it keeps SIG_IGN
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `retention plan | head` ends quietly
    try:
        if args.command == "status":
            from .service.client import print_status
            return print_status(args.url, as_json=args.json)
        config = load(args.config)
        if args.command == "check":
            return _check(args.config, config, as_json=args.json)
        configure_logging(config.service.log_level, config.service.log_format)
        if args.command == "serve":
            from .service.serve import serve
            return serve(config, config_path=args.config, demo=args.demo)
        if args.command == "compact":
            return _compact(args, config)
        at = parse_time(args.at) if getattr(args, "at", None) else None
        if args.command == "offsets":
            return _offsets(args, config, at)
        return _plan_or_clean(args, config, at)
    except ConfigError as exc:
        print(f"retention: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ValueError as exc:
        if args.command in ("plan", "offsets") and (str(exc).startswith("--at") or isinstance(exc, UnknownLogError)):
            print(f"retention: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        raise
    except KeyboardInterrupt:
        return EXIT_FAILED


def _plan_or_clean(args: argparse.Namespace, config: RetentionConfig, at: datetime | None) -> int:
    from .deletion.cleaner import Cleaner
    from .deletion.report import render_result
    cleaner = Cleaner(config)

    def work():
        if args.command == "plan":
            return cleaner.plan(at)
        cleaner.trigger_manual(force=args.force)
        return cleaner.run_pass()
    return _report(args, work, cleaner.close, render_result, lambda r: r.executed and r.failed)


def _offsets(args: argparse.Namespace, config: RetentionConfig, at: datetime) -> int:
    answer = offsets_at(config, at, args.log)
    print(json.dumps(answer, indent=2) if args.json else render_offsets(answer))
    return EXIT_FAILED if any("error" in log for log in answer["logs"].values()) else EXIT_OK


def _compact(args: argparse.Namespace, config: RetentionConfig) -> int:
    from .compaction.summary import render_compaction, render_output
    from .compaction.compactor import Compactor
    def progress(log, output):
        print(render_output(log, output, dry_run=args.dry_run), file=sys.stderr, flush=True)
    # A progress line per output on a terminal only; stdout keeps the report.
    on_output = progress if sys.stderr.isatty() else None
    compactor = Compactor(config)
    return _report(args, lambda: compactor.run(dry_run=args.dry_run, on_output=on_output), compactor.close,
                   render_compaction, lambda r: r.failed)


def _report(args: argparse.Namespace, work, close, render, failed) -> int:
    """Run `work()`, then print its result (JSON or `render`ed); status 1 when it raised or `failed`."""
    try:
        result = work()
    except Exception as exc:  # noqa: BLE001 (one line to the operator, status 1)
        logger.opt(exception=exc).debug("failed")
        print(f"retention: {args.command} failed: {exc}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        close()
    if args.json:
        json.dump(result.to_json_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render(result))
    return EXIT_FAILED if failed(result) else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
