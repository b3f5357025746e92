"""`lab explain RUN [MSG_ID]`: the command's room — a message's timeline and the verdict's
explanation of it, or the run's anomalous messages a line each (``lab.judge.timeline``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from lab.cli.common import UsageError


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`lab explain`'s arguments."""
    p = sub.add_parser("explain", help="a message's timeline and why the verdict excused it (or did not); "
                       "without an id, the run's anomalous messages")
    p.add_argument("run", type=Path, metavar="RUN_DIR", help="a run's folder (manifest.json, samples.parquet)")
    p.add_argument("msg_id", nargs="?", metavar="MSG_ID", help="a message id, such as p0:17")


def cmd_explain(args: argparse.Namespace) -> int:
    from lab.judge.timeline import NotARun, UnknownMessage, anomalous, describe, load, one_line, story

    try:
        run = load(args.run)
        if args.msg_id is not None:
            print("\n".join(describe(run, story(run, args.msg_id))))
            return 0
    except (NotARun, UnknownMessage) as e:
        raise UsageError(str(e)) from None
    stories = anomalous(run)
    if not stories:
        print(f"{args.run}: no message lost, duplicated or overtaken")
        return 0
    unexplained = [s for s in stories if s.unexplained]
    print(f"{len(stories)} anomalous messages, {len(unexplained)} that nothing explains "
          f"(first); `lab explain {args.run} MSG_ID` tells one's story:")
    for s in stories:
        print(one_line(run, s))
    return 0


#: the subcommands this module adds, and the function each runs
COMMANDS = {"explain": cmd_explain}
