"""`lab serve cassieq`: one CassieQ API node — the queue API and the admin API — over a
store that several API nodes may share (a SQLite file on one machine, PostgreSQL across
machines), until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import random
from pathlib import Path

from lab.design.worlds import on_signals
from lab.design.worlds import LiveWorld
from lab.design.worlds import ready_line
from lab.design import Runtime

NODE = "cassieq"
HELP = "a CassieQ API node: the queue API and the admin API over a shared store"
#: the flag that sets each port of the ready line (lab.worlds.live.processes restarts on the same ports)
PORTS = {"http": "--port", "admin": "--admin-port"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", type=int, default=8080, help="queue API port (default 8080; 0 = any free port)")
    p.add_argument("--admin-port", type=int, default=8081,
                   help="admin API port (default 8081; it has no authentication: keep it on loopback)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--data-dir", type=Path, required=True, help="this node's folder (and the default store's)")
    p.add_argument("--store", help="sqlite:///path/to/file.db (default: DATA_DIR/cassieq.db), or postgresql://…")
    p.add_argument("--node-index", type=int, default=0, help="this node's number among the API nodes (default 0)")
    p.add_argument("--nodes", type=int, default=1, help="API nodes sharing the store (default 1): each runs "
                                                        "the repair workers of its slice of the queues")
    p.add_argument("--skew", type=float, default=5.0,
                   help="seconds a signed request's time may be off (default 5, as the original's code)")
    p.add_argument("--repair-refresh", type=float, default=60.0,
                   help="seconds between looks for queues to repair (default 60)")


def serve(args: argparse.Namespace, ready=print) -> None:
    """Serve until interrupted; ``ready`` is told the ready line once the ports are open."""
    for flag in ("port", "admin_port"):
        if not 0 <= getattr(args, flag) <= 65535:
            raise ValueError(f"--{flag.replace('_', '-')} {getattr(args, flag)}: use 0 to 65535")
    if not 0 <= args.node_index < args.nodes:
        raise ValueError(f"--node-index {args.node_index}: use 0 to {args.nodes - 1} (--nodes {args.nodes})")
    for flag in ("skew", "repair_refresh"):
        if not getattr(args, flag) > 0:
            raise ValueError(f"--{flag.replace('_', '-')} {getattr(args, flag)}: use a number of seconds > 0")
    from lab.backends.cassieq.stores import open_store

    args.data_dir.mkdir(parents=True, exist_ok=True)
    store = open_store(args.store or f"sqlite:///{args.data_dir.resolve() / 'cassieq.db'}")  # ValueError: a bad URL
    # the node's random (message tags, stats ids) must differ between processes and restarts:
    # a tag is what tells a re-created queue's message from the old life's (its receipt)
    world = LiveWorld(seed=random.SystemRandom().randrange(1 << 63), root=args.data_dir,
                      disk_roots={NODE: args.data_dir}, bind={"http": (args.host, args.port), "admin": (args.host, args.admin_port)})

    async def main(_control: Runtime) -> None:
        from lab.backends.cassieq.node import boot_cassieq

        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        on_signals(loop, stop.set)  # a clean stop; `lab serve` then ends as interrupted (130)

        async def boot(rt: Runtime) -> None:
            # account keys are secrets: the OS's source, not the node's seeded random
            await boot_cassieq(rt, store, index=args.node_index, count=args.nodes, key_random=random.SystemRandom(),
                               skew_ms=round(args.skew * 1000), repair_refresh=args.repair_refresh)

        await world.start(NODE, boot)
        ready(ready_line("cassieq", {name: port for (_, name), port in world.listening.items()}))
        try:
            await stop.wait()
        finally:
            await world.node(NODE).net.close()
            store.close()

    world.run(main)
