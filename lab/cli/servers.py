"""`lab serve`, `lab cluster` and a design's own tools (`lab NAME TOOL ...`): the commands each
design brings, their flags its own.
"""

from __future__ import annotations

import argparse

from lab.cli.common import UsageError, declared_part, design_parts


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`lab serve DESIGN`, each design's tools and `lab cluster DESIGN`, as the designs declare them."""
    p = sub.add_parser("serve", help="run a design's server (its real wire protocol)")
    serves = p.add_subparsers(dest="design", required=True, metavar="DESIGN")
    for name, module in design_parts("serve"):
        module.add_arguments(serves.add_parser(name, help=module.HELP))
    for name, module in design_parts("tools"):  # lab NAME TOOL ...
        module.add_arguments(sub.add_parser(name, help=module.HELP))

    p = sub.add_parser("cluster", help="run a design's cluster of local server processes")
    clusters = p.add_subparsers(dest="design", required=True, metavar="DESIGN")
    for name, module in design_parts("cluster"):
        module.add_arguments(clusters.add_parser(name, help=module.HELP))


def cmd_serve(args: argparse.Namespace) -> int:
    from lab.worlds import interrupt
    from lab.experiments.planting import plant_from_environment

    plant_from_environment(args.design)  # the test hook QUEUE_LAB_MUTANT: off unless set
    try:
        declared_part(args.design, "serve").serve(args)
    except ValueError as e:
        raise UsageError(str(e)) from None
    except OSError as e:  # the port is taken, the folder is not writable...
        raise UsageError(f"cannot serve: {e}") from None
    interrupt.raise_if_received()  # stopped cleanly by Ctrl-C or SIGTERM: it still ends as interrupted
    return 0


def cmd_cluster(args: argparse.Namespace) -> int:
    try:
        return declared_part(args.design, "cluster").run(args)
    except ValueError as e:  # a bad flag, a node that did not start
        raise UsageError(str(e)) from None
    except OSError as e:  # the folder is not writable...
        raise UsageError(f"cannot start the cluster: {e}") from None


def cmd_design_tool(args: argparse.Namespace) -> int:
    try:
        return declared_part(args.command, "tools").run(args)
    except ValueError as e:  # a missing file, a file of the wrong kind
        raise UsageError(str(e)) from None


#: the subcommands this module adds, and the function each runs
COMMANDS = {"serve": cmd_serve, "cluster": cmd_cluster}
