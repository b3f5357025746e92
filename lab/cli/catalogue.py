"""`lab backends` and `lab workloads`: what the lab holds, listed; nothing runs."""

from __future__ import annotations

import argparse

from lab.design.peer import Peer
from lab.design.registry import REGISTRY, UnknownBackend, backend_class, problems
from lab.workloads.spec import load_workload


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`lab backends` and `lab workloads` (neither takes a flag)."""
    sub.add_parser("backends", help="list the installed designs: where each comes from and what it supports")
    sub.add_parser("workloads", help="list the standard workloads (runnable by name)")


def cmd_backends(args: argparse.Namespace) -> int:
    """Every design (the control first: the floor), then one line per design refused."""
    for name in REGISTRY:
        try:
            cls = backend_class(name)
        except UnknownBackend:
            continue  # named with the refused ones below
        print(f"{name}: {cls.about.summary}")
        print(f"    from: {REGISTRY[name].where}")
        print(f"    worlds: {', '.join(cls.worlds)}")
        if issubclass(cls, Peer):  # a real broker (is_peer): the build the lab would run
            print(f"    broker: {cls.binary} from the Debian package {cls.package} {cls.version()}")
        defaults = cls.check_options({})
        nodes = _server_nodes(name)
        if nodes:
            print(f"    server nodes (default options; a fault's target may name them): {', '.join(nodes)}")
        print("    promises (default options; a run is judged by its own):")
        for reliable in (True, False):
            promises = cls.promises(defaults, reliable)
            first, *rest = promises.lines()
            print(f"      {promises.by}: {first}")
            for line in rest:
                print(f"        {line}")
        print("    options (--option KEY=VALUE):")
        for option in sorted(cls.options_declared, key=lambda o: o.name):
            print(f"      {option.name}: {option.describe()}")
    refused = problems()
    if refused:
        print("\nrefused (every other design works; the commands that ask for these say why):")
        for problem in refused:
            print(f"  {problem.line()}")
    return 0


def _server_nodes(name: str) -> tuple[str, ...]:
    """The design's server nodes under its defaults, or none where it cannot say without
    running (a broker that runs live only)."""
    from lab.experiments.swarm_draw import design_servers

    try:
        return design_servers(name)
    except Exception:  # noqa: BLE001 (a listing never fails for one design's constructor)
        return ()


def cmd_workloads(args: argparse.Namespace) -> int:
    from lab.workloads.spec import scenario_files, standard_workload_files

    print("standard workloads (lab compare runs them; files: lab/workloads/):")
    for path in standard_workload_files():
        w = load_workload(path)
        print(f"  {w.name:<26} {w.description}")
    print("\nfault scenarios (lab matrix runs them; files: lab/workloads/scenarios/):")
    for path in scenario_files():
        w = load_workload(path)
        print(f"  {w.name:<26} {w.description}")
    print("\nrun one: lab run NAME --backend BACKEND [--world sim|live]")
    return 0


#: the subcommands this module adds, and the function each runs
COMMANDS = {"backends": cmd_backends, "workloads": cmd_workloads}
