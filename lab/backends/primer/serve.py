"""`lab serve primer`: one Primer node — its client API over HTTP and its peer port —
in a full mesh with the peers named on the command line, until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import random
from pathlib import Path
from typing import Any

from lab.design.worlds import on_signals
from lab.design.worlds import LiveWorld
from lab.design.worlds import ready_line
from lab.design import Runtime

DESIGN = "primer"
HELP = "a Primer node: the client API over HTTP, and the peer port its cluster's nodes talk on"
#: the flag that sets each port of the ready line (lab.worlds.live.processes restarts on the same ports)
PORTS = {"http": "--port", "peer": "--peer-port"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--node", default="n1", help="this node's name, as its peers know it (default n1)")
    p.add_argument("--port", type=int, default=9001, help="client API port (default 9001; 0 = any free port)")
    p.add_argument("--peer-port", type=int, default=9101,
                   help="port the other nodes reach this one on (default 9101; 0 = any free port)")
    p.add_argument("--peers", default="",
                   help="the other nodes, NAME=HOST:PORT,... with each one's peer port (default: none)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--data-dir", type=Path, required=True, help="this node's folder (its append-only files)")
    p.add_argument("--replicas", type=int, default=2, help="W: copies of each message, this node's among them "
                                                           "(default 2)")
    p.add_argument("--replication", default="sync", help="sync (all W at once) or chain (head to tail; "
                                                         "default sync)")
    p.add_argument("--persistence", default="off", help="off (memory only) or aof (an append-only file per "
                                                        "queue and log, fsynced; default off)")
    p.add_argument("--timeout", type=float, default=1.0, help="seconds a call to a peer may take (default 1)")
    p.add_argument("--lease", type=float, default=5.0,
                   help="seconds an at-least-once get leases a message for (default 5)")
    p.add_argument("--rules", type=Path, help="a routing rules file (the mapping DSL) applied to every put")
    from lab.backends.primer.core.config import SUSPECT_AFTER_S

    p.add_argument("--suspect-after", type=float, default=SUSPECT_AFTER_S,
                   help=f"seconds without a beat from a peer before it counts as down (default {SUSPECT_AFTER_S:g})")


def parse_peers(text: str, node: str) -> dict[str, tuple[str, int]]:
    """``NAME=HOST:PORT,...`` as ``{name: (host, port)}``; ValueError (one line) naming the
    entry that is wrong."""
    peers: dict[str, tuple[str, int]] = {}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        name, sep, address = entry.partition("=")
        host, colon, port = address.rpartition(":")
        host = host[1:-1] if host.startswith("[") and host.endswith("]") else host  # [::1]:9102
        if not sep or not name or not colon or not host:
            raise ValueError(f"--peers entry {entry!r}: use NAME=HOST:PORT")
        if not port.isascii() or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise ValueError(f"--peers entry {entry!r}: the port must be a number from 1 to 65535")
        if name == node:
            raise ValueError(f"--peers entry {entry!r}: {name} is this node (--node); list the other nodes only")
        if name in peers:
            raise ValueError(f"--peers names {name} twice")
        peers[name] = (host, int(port))
    return peers


def load_routes(path: Path | None) -> Any:
    """The rules file's ``Routes`` (None without one); ValueError (one line) for a file that
    cannot be read or parsed, with the parser's line and column."""
    if path is None:
        return None
    from lab.backends.primer.core.routing import Routes

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"--rules {path}: cannot read it: {e}") from None
    try:
        return Routes.parse(text)
    except ValueError as e:  # the parser's error names the line and column
        raise ValueError(f"--rules {path}: {e}") from None


def node_config(args: argparse.Namespace) -> tuple[Any, dict[str, tuple[str, int]]]:
    """The node's ``NodeConfig`` and its peers' addresses; ValueError (one line) for a bad flag."""
    from lab.backends.primer.core.config import NodeConfig
    from lab.backends.primer.core.errors import PrimerError

    for flag in ("port", "peer_port"):
        if not 0 <= getattr(args, flag) <= 65535:
            raise ValueError(f"--{flag.replace('_', '-')} {getattr(args, flag)}: use 0 to 65535")
    if args.port and args.port == args.peer_port:
        raise ValueError(f"--port and --peer-port are both {args.port}: use two ports")
    peers = parse_peers(args.peers, args.node)
    try:
        config = NodeConfig(args.node, peers=tuple(peers), replicas=args.replicas, replication=args.replication,
                            persistence=args.persistence, timeout=args.timeout, lease=args.lease,
                            suspect_after=args.suspect_after)
    except PrimerError as e:  # a bad node name
        raise ValueError(f"--node: {e}") from None
    return config, peers


def serve(args: argparse.Namespace, ready=print) -> None:
    """Serve until interrupted; ``ready`` is told the ready line once both ports are open."""
    config, peers = node_config(args)
    routes = load_routes(args.rules)
    args.data_dir.mkdir(parents=True, exist_ok=True)
    # the node's random (message ids, receipts, replica choice) must differ between
    # processes and restarts, or two nodes (or two lives of one) would draw the same ids
    world = LiveWorld(seed=random.SystemRandom().randrange(1 << 63), root=args.data_dir,
                      disk_roots={config.name: args.data_dir},
                      bind={"http": (args.host, args.port), "peer": (args.host, args.peer_port)})
    world.addresses.update(peers)

    async def main(_control: Runtime) -> None:
        from lab.backends.primer.node import boot_primer

        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        on_signals(loop, stop.set)  # a clean stop; `lab serve` then ends as interrupted (130)
        nodes = []

        async def boot(rt: Runtime) -> None:
            nodes.append(await boot_primer(rt, config, routes))

        rt = await world.start(config.name, boot)
        # http first: a ready line's first port is the design's main one
        ready(ready_line(DESIGN, {name: world.listening[(config.name, name)] for name in PORTS
                                  if (config.name, name) in world.listening}))
        try:
            await stop.wait()
        finally:
            await nodes[0].stop()  # the ticks stop and the files are flushed before the sockets close
            await rt.net.close()

    world.run(main)
