"""`lab aggregate`: the samples of runs summarised with Spark."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lab.cli.common import UsageError


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`lab aggregate`'s flags."""
    p = sub.add_parser("aggregate", help="summarise the samples of runs with Spark")
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR", help="run directories (or compare folders)")
    p.add_argument("--out", type=Path, help="output directory (default: results/summaries/<time>)")
    p.add_argument("--master", help="Spark master: local[*] (default), local[N] or spark://HOST:7077")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting (repeatable)")


def _spark_conf(items: list[str]) -> dict[str, str]:
    conf = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--conf takes KEY=VALUE, got {item!r}")
        conf[key.strip()] = value.strip()
    return conf


def cmd_aggregate(args: argparse.Namespace) -> int:
    from datetime import datetime, timezone

    from lab.aggregate.pipeline import aggregate
    from lab.aggregate.runs import files_by_run
    from lab.history.paths import results_dir
    from lab.aggregate.spark import spark_session
    from lab.judge.summary import format_spark_summary

    try:
        files_by_run(args.runs)  # a missing run or a torn file fails before a JVM starts
    except (FileNotFoundError, ValueError) as e:
        raise UsageError(str(e)) from None
    from lab.worlds.interrupt import skipped_line, split_interrupted

    for path, cut in split_interrupted(args.runs)[1]:  # folders an interrupt cut short: named, not read
        print(skipped_line(path, cut), file=sys.stderr)
    out = args.out or results_dir() / "summaries" / datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    try:
        result = aggregate(spark_session(args.master, _spark_conf(args.conf)), args.runs, out)
    except ValueError as e:  # samples the pipeline can't take (unknown phases)
        raise UsageError(str(e)) from None
    print(format_spark_summary(result.summary))
    print()
    for _, c in result.checks.iterrows():
        verdict = c["verdict"].upper() + ("" if c["valid"] else f" ({c['reason']})")
        print(f"{c['run_id']}: {verdict}: {c['attempts']} attempted, {c['ok']} ok, {c['lost']} lost, "
              f"{c['unexpected']} unexpected, {c['duplicated']} duplicated, {c['recovered']} recovered")
    print(f"\nsummaries: {result.directory} (summary, throughput, checks as .parquet and .json)")
    return 0


#: the subcommands this module adds, and the function each runs
COMMANDS = {"aggregate": cmd_aggregate}
