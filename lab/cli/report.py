"""`lab report`: runs as one self-contained HTML page."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from lab.cli.common import UsageError

if TYPE_CHECKING:
    from lab.present.report import Run


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
        runs = find_runs(args.runs, skipped)
        page = render(runs)
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
    for line in timelines(runs, out):
        print(line)
    return 0


def timelines(runs: list[Run], out: Path) -> list[str]:
    """Each run's operations against time (``lab.present.timeline``), as timeline.html in a
    folder per run beside the report: ``<report>-timelines/<run folder>/timeline.html``."""
    from lab.present import timeline

    root = out.with_name(out.stem + "-timelines")
    said: list[str] = []
    used: set[str] = set()
    for run in runs:
        name = run.directory.name
        while name in used:  # two runs of one name (two compare outputs): told apart
            name += "+"
        used.add(name)
        title = f"{run.backend} ({run.world}), {run.workload}: {run.directory}"
        try:
            said.append(f"written: {timeline.write(run.directory, root / name / 'timeline.html', title)}")
        except OSError as e:
            raise UsageError(f"{root / name}: cannot write the timeline: {e.strerror or e}") from None
    return said


#: the subcommands this module adds, and the function each runs
COMMANDS = {"report": cmd_report}
