"""`lab brokers`: the real brokers beside the designs, live, under the same faults; the table
and the answer in words (``lab.experiments.brokers``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from lab.cli.common import UsageError


def add_parser(sub: argparse._SubParsersAction) -> None:
    from lab.experiments.brokers import WORKLOADS

    p = sub.add_parser("brokers", help="the real brokers (Redis, RabbitMQ, NATS, beanstalkd) under each durability "
                                       "setting beside the designs, live, under the same faults: a table and its "
                                       "answer in words; exits 1 when a promise is broken")
    p.add_argument("--brokers", help="comma-separated peers (default: every real broker installed)")
    p.add_argument("--designs", help="comma-separated designs beside them (default: the lab's own but the in-memory "
                                     "control; '' for none)")
    p.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated (default {','.join(WORKLOADS)})")
    p.add_argument("--seeds", type=int, default=1, help="seeds per cell (default 1)")
    p.add_argument("--out", type=Path, help="output directory (default: results/runs/matrix-<time>)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _names(text: str | None) -> list[str] | None:
    return None if text is None else _list(text)


def _list(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def cmd_brokers(args: argparse.Namespace) -> int:
    from lab.design.registry import is_peer
    from lab.experiments.brokers import answer, grid, markdown, run_brokers, table

    brokers = _names(args.brokers)
    for name in brokers or []:
        if not is_peer(name):
            raise UsageError(f"--brokers {name}: not a real broker (`lab backends` lists them: redis, rabbitmq, "
                             f"nats, beanstalkd)")
    matrix = run_brokers(brokers, _names(args.designs), _list(args.workloads), args.seeds, args.out,
                         not args.no_progress)
    lines = table(matrix.rows)
    text = grid(lines) + "\n\n" + answer(lines) + "\n\n" + markdown(lines) + "\n"
    (matrix.directory / "brokers.md").write_text(text)
    print()
    print(text)
    print(f"table: {matrix.directory / 'brokers.md'} (every figure: {matrix.csv_path})")
    return 1 if any(line["verdict"] == "invalid" for line in lines) else 0


#: the subcommands this module adds, and the function each runs
COMMANDS = {"brokers": cmd_brokers}
