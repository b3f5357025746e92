"""`lab primer TOOL`: Primer's own tools (today: ``dump``, the append-only files record by record)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "Primer tools"


def add_arguments(p: argparse.ArgumentParser) -> None:
    tools = p.add_subparsers(dest="tool", required=True, metavar="TOOL")
    d = tools.add_parser("dump", help="print append-only files (queue.*.aof, log.*.aof) record by record")
    d.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="a node's .aof files")


def run(args: argparse.Namespace) -> int:
    """Dump each file; 1 if one had a corrupt record (its dump ends with a line saying where
    and why, and the reason goes to stderr too), else 0. ValueError (one line) for a file
    that is missing or no append-only file, before anything of it is printed."""
    from lab.backends.primer.dump import dump

    status = 0
    for path in args.paths:
        lines = dump(path)
        if len(args.paths) > 1:
            print(f"# {path}")
        for line in lines:
            print(line)
        if lines.corrupt is not None:
            print(f"lab: error: {lines.corrupt}", file=sys.stderr)
            status = 1
    return status
