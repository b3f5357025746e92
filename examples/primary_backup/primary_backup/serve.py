"""`lab serve primary_backup`: one `primary_backup` node (a or b) as a process of its own, until
Ctrl-C or SIGTERM. The live world starts it (with ``--data-dir``, ``--port``, ``--peer-port``
and the flags of ``driver.serve_args``: which node, where its peer is), reads its ready line
and sends its faults to this process."""

from __future__ import annotations

import argparse
import asyncio
import random
from pathlib import Path
from typing import Callable

from lab.design import Runtime
from lab.design.worlds import LiveWorld, on_signals, ready_line

DESIGN = "primary_backup"
HELP = "a primary_backup node: its HTTP front, and the peer port the other node replicates over"
#: the flag that sets each named port of the ready line (a restart asks for the same ports)
PORTS = {"http": "--port", "peer": "--peer-port"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--node", default="a", help="this node's name: a or b (default a)")
    p.add_argument("--port", type=int, default=8080, help="HTTP port (default 8080; 0 = any free port)")
    p.add_argument("--peer-port", type=int, default=8180, help="port the other node reaches this one on "
                                                                "(default 8180; 0 = any free port)")
    p.add_argument("--peer", default="", help="where the other node's peer port is, HOST:PORT")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--data-dir", type=Path, required=True, help="this node's folder (in memory: only its log)")
    p.add_argument("--max-length", type=int, default=0, help="messages a queue holds at most (default 0: no limit)")


def _address(text: str) -> tuple[str, int]:
    host, colon, port = text.rpartition(":")
    if not colon or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"--peer {text!r}: use HOST:PORT")
    return host, int(port)


def serve(args: argparse.Namespace, ready: Callable[[str], None] = print) -> None:
    """Serve until interrupted; ``ready`` is told the ready line once the ports are open.
    ValueError (a usage error) for a bad flag."""
    from primary_backup.node import peer_of

    for flag in ("port", "peer_port"):
        if not 0 <= getattr(args, flag) <= 65535:
            raise ValueError(f"--{flag.replace('_', '-')} {getattr(args, flag)}: use 0 to 65535")
    if args.max_length < 0:
        raise ValueError(f"--max-length {args.max_length}: use a whole number >= 0")
    peer = peer_of(args.node)
    args.data_dir.mkdir(parents=True, exist_ok=True)
    # a fresh seed per process: receipts must differ from one life of the node to the next
    world = LiveWorld(seed=random.SystemRandom().randrange(1 << 63), root=args.data_dir,
                      disk_roots={args.node: args.data_dir},
                      bind={"http": (args.host, args.port), "peer": (args.host, args.peer_port)})
    if args.peer:
        world.addresses[peer] = _address(args.peer)

    async def main(_control: Runtime) -> None:
        from primary_backup.node import boot_node

        stop = asyncio.Event()
        on_signals(asyncio.get_running_loop(), stop.set)  # a clean stop; `lab serve` then exits 130

        async def boot(rt: Runtime) -> None:
            await boot_node(rt, args.node, args.max_length)

        rt = await world.start(args.node, boot)
        ready(ready_line(DESIGN, {name: world.listening[(args.node, name)] for name in PORTS
                                  if (args.node, name) in world.listening}))
        try:
            await stop.wait()
        finally:
            await rt.net.close()

    world.run(main)
