"""`lab cluster primer`: a Primer cluster on this machine — ``lab serve primer`` processes
n1..nN in a full mesh on consecutive loopback ports, each with its own data dir — until
SIGINT/SIGTERM, when every node is stopped cleanly (SIGTERM, then kill -9 after a
timeout). ``DATA_DIR/cluster.json`` says where each node is, for clients and scripts."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from lab.design.worlds import ServerProcess

DESIGN = "primer"
HELP = "a Primer cluster of N local nodes (lab serve primer processes), until Ctrl-C"
HOST = "127.0.0.1"
POLL_S = 0.5  # how often a node that died on its own is looked for
STOP_GRACE = 3.0  # seconds the nodes have to stop on SIGTERM (Ctrl-C ends the command within 5 s) before kill -9


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nodes", type=int, default=3, help="how many nodes (default 3)")
    p.add_argument("--base-port", type=int, required=True,
                   help="client API port of n1; n2 gets the next one, and so on")
    p.add_argument("--peer-base-port", type=int, help="peer port of n1, then consecutive (default: base port + 100)")
    p.add_argument("--data-dir", type=Path, required=True,
                   help="the cluster's folder: DATA_DIR/n1 ..., their logs n1.log ..., and cluster.json")
    p.add_argument("--replicas", type=int, default=2, help="W: copies of each message (default 2)")
    p.add_argument("--replication", default="sync", help="sync or chain (default sync)")
    p.add_argument("--persistence", default="off", help="off or aof (default off)")
    p.add_argument("--rules", type=Path, help="a routing rules file every node applies")


def plan(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Each node's name, ports and data dir; ValueError (one line) for a bad flag."""
    if args.nodes < 1:
        raise ValueError(f"--nodes {args.nodes}: use 1 or more")
    peer_base = args.base_port + 100 if args.peer_base_port is None else args.peer_base_port
    for flag, base in (("--base-port", args.base_port), ("--peer-base-port", peer_base)):
        if not 1 <= base <= 65536 - args.nodes:
            raise ValueError(f"{flag} {base}: {args.nodes} consecutive ports from it must fit in 1 to 65535")
    if abs(args.base_port - peer_base) < args.nodes:
        raise ValueError(f"the client ports from {args.base_port} and the peer ports from {peer_base} overlap: "
                         f"set --peer-base-port at least {args.nodes} away")
    if not 1 <= args.replicas <= args.nodes:
        raise ValueError(f"--replicas {args.replicas}: use 1 to {args.nodes} (--nodes {args.nodes})")
    return [{"name": f"n{i + 1}", "port": args.base_port + i, "peer_port": peer_base + i,
             "data_dir": args.data_dir / f"n{i + 1}"} for i in range(args.nodes)]


def serve_flags(args: argparse.Namespace, nodes: list[dict[str, Any]], node: dict[str, Any]) -> list[str]:
    """``lab serve primer``'s flags for ``node``, beyond its data dir and ports."""
    peers = ",".join(f"{n['name']}={HOST}:{n['peer_port']}" for n in nodes if n is not node)
    flags = ["--node", node["name"], "--host", HOST, "--replicas", str(args.replicas),
             "--replication", args.replication, "--persistence", args.persistence]
    if peers:
        flags += ["--peers", peers]
    if args.rules is not None:
        flags += ["--rules", str(args.rules.resolve())]
    return flags


def run(args: argparse.Namespace) -> int:
    """Start the nodes, write cluster.json, wait for SIGINT/SIGTERM, stop the nodes; then
    KeyboardInterrupt (the command ends as interrupted, as every `lab` command on Ctrl-C)."""
    from lab.backends.primer.serve import load_routes

    nodes = plan(args)
    load_routes(args.rules)  # a bad rules file is one line here, not N servers' logs
    args.data_dir.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    processes: dict[str, ServerProcess] = {}
    try:  # a signal while the nodes start is kept (stop is set): the cluster stops once they are up
        for node in nodes:
            proc = ServerProcess(DESIGN, node["data_dir"], serve_flags(args, nodes, node))
            proc.ports = {"http": node["port"], "peer": node["peer_port"]}  # fixed: the peers are told them
            processes[node["name"]] = proc
            proc.launch()
        for name, proc in processes.items():
            _wait_ready(name, proc)
        _write_manifest(args.data_dir / "cluster.json", nodes, processes)
        for node in nodes:
            proc = processes[node["name"]]
            print(f"{node['name']}: pid {proc.pid}, http://{HOST}:{node['port']}, peer {HOST}:{node['peer_port']}, "
                  f"data {node['data_dir']}, log {proc.log_path}", flush=True)
        print(f"cluster of {len(nodes)}: {args.data_dir / 'cluster.json'}; Ctrl-C stops every node", flush=True)
        _watch(processes, stop)
    finally:
        _stop_all(processes)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(f"stopped {len(processes)} nodes", flush=True)
    raise KeyboardInterrupt  # only Ctrl-C or SIGTERM ends a cluster: `lab: interrupted`, exit 130


def _wait_ready(name: str, proc: ServerProcess) -> None:
    try:
        proc.wait_ready()
    except RuntimeError:
        lines = [line for line in proc.log().splitlines() if line.strip()]
        code = proc.proc.poll() if proc.proc is not None else None
        said = lines[-1].strip() if lines else f"exit code {code}"
        raise ValueError(f"{name} did not start: {said} (log: {proc.log_path})") from None


def _write_manifest(path: Path, nodes: list[dict[str, Any]], processes: dict[str, ServerProcess]) -> None:
    manifest = {"nodes": [{"name": n["name"], "pid": processes[n["name"]].pid, "url": f"http://{HOST}:{n['port']}",
                           "peer": f"{HOST}:{n['peer_port']}"} for n in nodes]}
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(partial, path)  # whole or absent: a script polling for it never reads half


def _watch(processes: dict[str, ServerProcess], stop: threading.Event) -> None:
    """Until ``stop``: say once on stderr when a node ends on its own (the others go on)."""
    reported: set[str] = set()
    while not stop.wait(POLL_S):
        for name, proc in processes.items():
            if name not in reported and not proc.running:
                reported.add(name)
                code = proc.proc.returncode if proc.proc is not None else None
                print(f"lab: {name} (pid {proc.pid}) exited with code {code}", file=sys.stderr, flush=True)


def _stop_all(processes: dict[str, ServerProcess]) -> None:
    """SIGTERM every running node at once, then wait for each; kill -9 one that takes too
    long. One SIGTERM each: a second could land after a node's handler is gone."""
    for proc in processes.values():
        proc.signal_stop()  # SIGTERM to a running node (none is paused here)
    deadline = time.monotonic() + STOP_GRACE  # one deadline for all: they stop side by side
    for proc in processes.values():
        if proc.proc is None:
            continue
        try:
            proc.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
        proc.stop()  # it has ended: this closes its pipe
