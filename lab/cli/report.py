"""`lab report`: runs as one self-contained HTML page."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lab.cli.common import UsageError


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`lab report`'s flags."""
    p = sub.add_parser("report", help="runs as one self-contained HTML file: a table and latency charts")
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR", help="run directories (or folders of runs, "
                   "e.g. a `lab compare` output)")
    p.add_argument("--out", type=Path, help="the HTML file (default: results/runs/report-<time>.html)")


def cmd_report(args: argparse.Namespace) -> int:
    from datetime import datetime, timezone

    from lab.history.paths import runs_dir
    from lab.present.report import NoRuns, find_runs, render

    out = args.out
    if out is None:
        out = runs_dir() / f"report-{datetime.now(timezone.utc).strftime('%Y%m%d-%H%M%S')}.html"
    elif out.is_dir():
        raise UsageError(f"--out {out}: a folder; give a file path such as {out / 'report.html'}")
    skipped: list[str] = []
    try:
        page = render(find_runs(args.runs, skipped))
    except NoRuns as e:
        raise UsageError(str(e)) from None
    for line in skipped:  # folders an interrupt cut short: named, not read
        print(line, file=sys.stderr)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(page, encoding="utf-8")
    except OSError as e:
        raise UsageError(f"--out {out}: cannot write: {e.strerror or e}") from None
    print(f"written: {out}")
    return 0


#: the subcommands this module adds, and the function each runs
COMMANDS = {"report": cmd_report}
