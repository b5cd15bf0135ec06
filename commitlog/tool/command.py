"""The `commitlog` command: segments, verify, dump, groups on a log directory. Exit statuses:
`EXIT_CODES` (those of `retention`: 0, 1, 2). Bad input is one line on stderr naming what and
where (exit 2), never a traceback, and changes nothing."""

from __future__ import annotations

import argparse
import os
import sys
from types import MappingProxyType

from ..errors import CommitLogError
from . import dump as dumping
from .group_offsets import WriterHoldsLog, change_group, describe_groups, render_change, render_groups
from .inputs import UsageError, check_log_path, open_log, parse_count, parse_offset, parse_time_ms
from .printing import emit
from .segments import describe_segments, render_segments
from .verify import render_verify, verify_log

__all__ = ["EXIT_CODES", "build_parser", "main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_CODES = MappingProxyType({
    EXIT_OK: "done (`verify`: every record and index agrees)",
    EXIT_FAILED: "failed: `verify` found a damaged file (named with its byte), the log could not be read "
                 "(permission denied, corrupt), or a reset or delete was refused because a writer holds the log",
    EXIT_USAGE: "the command line is wrong (a missing path, a directory that is no log, a bad offset or time, "
                "an unknown group): one line on stderr names what and where; nothing changed",
})


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, as `retention` does
        self.exit(EXIT_USAGE, f"commitlog: error: {message}\n")


def _command(sub, name: str, summary: str, description: str, *, as_json: str | None):
    parser = sub.add_parser(name, help=summary, description=description)
    parser.add_argument("path", metavar="PATH", help="the log directory")
    if as_json:
        parser.add_argument("--json", action="store_true", help=as_json)
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="commitlog", description="Look inside a commit log directory: its segments, "
                     "their integrity, its records and its consumer groups. Read-only unless asked (only "
                     "`groups --reset/--delete` write).",
                     epilog="Exit status: " + "; ".join(f"{code} {text.split(':')[0].split(' (')[0]}"
                                                         for code, text in EXIT_CODES.items()) + ".")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser, metavar="COMMAND")
    _command(sub, "segments", "each segment: offsets, bytes, times, state, live ratio",
             "Print each segment of the log, oldest first: base and end offsets, records, file and used "
             "bytes, first and last record timestamps, state (active or sealed; short: sealed smaller than "
             "the segment size, by a time-based roll or a compaction; archived: listed whole in the log's "
             "copy of its archive manifest) and live ratio (the share of its bytes not marked dead).",
             as_json="print a JSON object instead of text")
    _command(sub, "verify", "check every record's CRC and every index against the data",
             "Read every record of every segment and check its CRC32, and check each index against the "
             "data (used bytes, record count, timestamps, every entry, base offset, its own CRC32). Exit 1 "
             "naming the first damaged file and byte; a torn write at the active segment's end (a crash's, "
             "cut at the writer's next open) and an index the store would rebuild are notes.",
             as_json="print a JSON object (problems, notes) instead of text")
    dump = _command(sub, "dump", "records as JSON lines",
                    "Print records as JSON lines: offset, timestamp, attributes, key and value as UTF-8 text "
                    "where they decode, base64 otherwise (key_encoding, value_encoding say which). Records are "
                    "read as a consumer reads them: dead records are passed over.", as_json=None)
    where = dump.add_mutually_exclusive_group()
    where.add_argument("--from", dest="from_offset", metavar="OFFSET", help="the first offset (default: the start)")
    where.add_argument("--since", metavar="TIME", help="from the first record written at or after TIME "
                       "(ISO 8601, naive: local time; or epoch milliseconds)")
    dump.add_argument("--count", metavar="N", help="at most N records")
    dump.add_argument("--follow", action="store_true", help="then wait for new records and print them as they "
                      "are written, until SIGINT or SIGTERM or the output is closed")
    dump.add_argument("--json", action="store_true", help="accepted for symmetry: the output is JSON lines anyway")
    groups = _command(sub, "groups", "consumer groups: offsets, lag, last commit; reset or delete one",
                      "Print each consumer group's committed offset, its lag in records and in bytes (of the live "
                      "records from its offset to the end) and its last commit time. --reset and --delete are "
                      "the only writes; both are refused while a writer holds the log (as Kafka refuses to reset "
                      "an active group), unless --force, and say what they changed.",
                      as_json="print a JSON object instead of text")
    change = groups.add_mutually_exclusive_group()
    change.add_argument("--reset", metavar="GROUP", help="move GROUP's committed offset (with --to)")
    change.add_argument("--delete", metavar="GROUP", help="forget GROUP")
    groups.add_argument("--to", metavar="WHERE", help="with --reset: earliest, latest, an offset, or a time "
                        "(ISO 8601, naive: local time; or @ then epoch milliseconds)")
    groups.add_argument("--force", action="store_true", help="reset or delete even while a writer holds the log")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except UsageError as exc:
        print(f"commitlog: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (WriterHoldsLog, CommitLogError, OSError) as exc:
        print(f"commitlog: {args.command}: {_one_line(exc)}", file=sys.stderr)
        return EXIT_FAILED
    except dumping.Stopped:
        return EXIT_OK
    except KeyboardInterrupt:
        return EXIT_FAILED


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and not isinstance(exc, CommitLogError) and exc.filename:
        return f"{exc.filename}: {exc.strerror or exc}"
    return " ".join(str(exc).split())


def _run(args: argparse.Namespace) -> int:
    if args.command == "verify":
        result = verify_log(check_log_path(args.path))
        emit(result, render_verify, args.json)
        if not result["ok"] and not args.json:
            first = result["problems"][0]
            print(f"commitlog: verify: {os.path.join(result['log'], first['file'])}"
                  + (f": byte {first['byte']}" if first["byte"] is not None else "") + f": {first['detail']}",
                  file=sys.stderr)
        return EXIT_OK if result["ok"] else EXIT_FAILED
    if args.command == "groups" and (args.reset or args.delete):
        if args.reset and not args.to:
            raise UsageError("--reset: give --to earliest, latest, an offset or a time")
        if args.to and not args.reset:
            raise UsageError("--to: only with --reset GROUP")
        result = change_group(args.path, args.reset or args.delete, args.to if args.reset else None,
                              force=args.force)
        emit(result, render_change, args.json)
        return EXIT_OK
    if args.command == "groups" and (args.to or args.force):
        raise UsageError(f"{'--to' if args.to else '--force'}: only with --reset GROUP or --delete GROUP")
    if args.command == "dump":
        return _dump(args)
    with open_log(args.path) as log:
        if args.command == "segments":
            emit(describe_segments(log), render_segments, args.json)
        else:
            emit(describe_groups(log), render_groups, args.json)
    return EXIT_OK


def _dump(args: argparse.Namespace) -> int:
    offset = None if args.from_offset is None else parse_offset(args.from_offset, "--from")
    since = None if args.since is None else parse_time_ms(args.since, "--since")
    count = None if args.count is None else parse_count(args.count)
    with open_log(args.path) as log:
        first = dumping.start_offset(log, offset, since, args.follow)
        if args.follow:
            dumping.stop_on_signals()
        try:
            dumping.dump(log, first, count, args.follow)
        except BrokenPipeError:
            _quiet_stdout()
        except dumping.Stopped:
            _quiet_stdout()
    return EXIT_OK


def _quiet_stdout() -> None:
    """Our reader is gone: nothing more may be written, nor flushed at exit (which would raise)."""
    try:
        sys.stdout.flush()
    except (BrokenPipeError, ValueError):
        pass
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
