"""`lab kestrel TOOL`: Kestrel's own tools (today: ``dump``, the original's qdump)."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "Kestrel tools"


def add_arguments(p: argparse.ArgumentParser) -> None:
    tools = p.add_subparsers(dest="tool", required=True, metavar="TOOL")
    d = tools.add_parser("dump", help="print journal files record by record (like the original's qdump)")
    d.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="journal files")


def run(args: argparse.Namespace) -> int:
    """Run the tool; ValueError (one line) for a file that is missing or no journal."""
    from lab.backends.kestrel.dump import qdump

    for path in args.paths:
        if not path.is_file():
            raise ValueError(f"{path}: no such journal file")
        for line in qdump(path):
            print(line)
    return 0
