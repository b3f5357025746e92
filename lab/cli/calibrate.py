"""`lab calibrate`: measure a design's service times and write its calibration file."""

from __future__ import annotations

import argparse
from pathlib import Path

from lab.cli.common import UsageError
from lab.design.registry import backend_class


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`lab calibrate`'s flags."""
    p = sub.add_parser("calibrate", help="measure a design's service times (in process) and loopback latency; "
                                         "write its calibration file (the sim world's CPU model)")
    p.add_argument("backend", help="backend name (see `lab backends`)")
    p.add_argument("--out", type=Path, help="the file to write (default: the design's committed "
                                            "lab/backends/<design>/calibration.yaml)")
    p.add_argument("--requests", type=int, default=None, metavar="N",
                   help="operation cycles per message size, and loopback round trips (default 1000)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def cmd_calibrate(args: argparse.Namespace) -> int:
    from lab.experiments.calibrate import DEFAULT_REQUESTS, MIN_REQUESTS, calibrate

    cls = backend_class(args.backend)
    requests = DEFAULT_REQUESTS if args.requests is None else args.requests
    if requests < MIN_REQUESTS:
        raise UsageError(f"--requests {requests}: use {MIN_REQUESTS} or more")
    out = args.out if args.out is not None else cls.cpu.path(cls)
    if out is None:
        raise UsageError(f"{args.backend} has no folder of its own: give --out FILE")
    if out.is_dir() or not out.parent.is_dir():
        raise UsageError(f"--out {out}: {'a folder' if out.is_dir() else 'no folder ' + str(out.parent)}; give a file path")
    calibration = calibrate(args.backend, requests, progress=not args.no_progress)
    calibration.write(out)
    print(calibration.table())
    print(f"\nwritten: {out} ({calibration.measured['seconds']} s)")
    return 0


#: the subcommands this module adds, and the function each runs
COMMANDS = {"calibrate": cmd_calibrate}
