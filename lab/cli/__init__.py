"""The `lab` command: run a workload, list the backends, compare the designs.

A user's mistake (a missing file, an unknown backend, a bad workload field) prints one
line, ``lab: error: ...``, and exits 2 — no traceback. Anything else is a bug and
keeps its traceback.

This package's front room: it builds the parser from the command modules beside it (one
per command or small family of commands, each adding its own subcommand) and dispatches.
Each command imports its heavy modules inside its function, so `lab --help` starts quickly.
"""

from __future__ import annotations

import argparse
import sys

from lab.cli import (aggregate, bench, brokers, calibrate, catalogue, compare, conform, doctor, explain, fidelity,
                     figures, load, matrix, mutants, new, regress, report, run, servers, swarm)
from lab.cli.common import USER_ERRORS, UsageError
from lab.cli.servers import cmd_design_tool

__all__ = ["main", "build_parser", "UsageError", "USER_ERRORS"]

#: The command modules, in the order `lab --help` lists their subcommands; each adds its parsers
#: (``add_parser``) and names the function each subcommand runs (``COMMANDS``).
_FAMILIES = (run, catalogue, compare, matrix, brokers, fidelity, report, explain, regress, aggregate, servers, load,
             swarm, mutants, conform, calibrate, bench, new, doctor, figures)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lab", description="queue-lab: compare message-queue designs "
                                     "in a simulated and a live world.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for family in _FAMILIES:
        family.add_parser(sub)
    return parser


COMMANDS = {name: function for family in _FAMILIES for name, function in family.COMMANDS.items()}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("queue-lab")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def main(argv: list[str] | None = None) -> int:
    from lab.worlds import interrupt

    args = build_parser().parse_args(argv)
    previous = interrupt.install()  # SIGTERM (a script's or CI's `kill`) stops a command as Ctrl-C does
    try:
        return COMMANDS.get(args.command, cmd_design_tool)(args)
    except USER_ERRORS as e:
        print(f"lab: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        interrupt.restore(previous, ignore=True)
        interrupt.reap_descendants()  # what the command's own clean-up missed: no process outlives it
        print("lab: interrupted", file=sys.stderr)
        return interrupt.EXIT_CODE
    finally:
        interrupt.restore(previous)  # main may run inside another program (the tests)
