"""`lab serve kestrel`: the memcache, text and admin ports over a queue folder, until
SIGINT/SIGTERM (then every journal is fsynced and closed)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from pathlib import Path

from typing import TYPE_CHECKING

from lab.design.worlds import on_signals
from lab.backends.kestrel.config import ServerConfig, load_config
from lab.design.worlds import LiveWorld
from lab.design.worlds import ready_line
from lab.design import Runtime

if TYPE_CHECKING:
    from lab.backends.kestrel.core.collection import QueueCollection

NODE = "kestrel"


HELP = "Kestrel's memcache, text and admin ports"
#: the flag that sets each port of the ready line (lab.worlds.live.processes restarts on the same ports)
PORTS = {"memcache": "--port", "text": "--text-port", "admin": "--admin-port"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", type=int, help="memcache port (default 22133, or the config's; 0 = any free port)")
    p.add_argument("--text-port", type=int, help="text protocol port (default 2222, or the config's)")
    p.add_argument("--admin-port", type=int, help="admin HTTP port: /stats.json, /stats.txt (default 2223)")
    p.add_argument("--host", help="address to listen on (default 127.0.0.1, or the config's listenAddress)")
    p.add_argument("--data-dir", type=Path, help="the queue path: one journal per queue (default: the config's queuePath)")
    p.add_argument("--config", type=Path, help="a TOML file with the original's option names (docs/designs/kestrel.md)")


def config_from(args: argparse.Namespace) -> ServerConfig:
    """The server's configuration: the file's, then the flags; ValueError names the problem."""
    config = load_config(args.config) if args.config else ServerConfig()
    for flag, attr in (("port", "memcache_port"), ("text_port", "text_port"), ("admin_port", "admin_port")):
        value = getattr(args, flag)
        if value is not None:
            if not 0 <= value <= 65535:
                raise ValueError(f"--{flag.replace('_', '-')} {value}: use 0 to 65535")
            setattr(config, attr, value)
    if args.host:
        config.listen_address = args.host
    if args.data_dir:
        config.queue_path = str(args.data_dir)
    elif not args.config:
        raise ValueError("give --data-dir (or a --config with queuePath)")
    return config


def serve(args: argparse.Namespace, ready=print) -> None:
    """Serve until interrupted; ``ready`` is told the ready line (lab.worlds.live.processes) once
    the ports are open."""
    config = config_from(args)
    # journal warnings (a cut tail: "DATA MAY HAVE BEEN LOST") must reach the operator
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    queue_path = Path(config.queue_path)
    queue_path.mkdir(parents=True, exist_ok=True)
    if not os.access(queue_path, os.W_OK):
        raise ValueError(f"queue path {queue_path} is not writable")
    bind = {name: (config.listen_address, port) for name, port in
            (("memcache", config.memcache_port), ("text", config.text_port)) if port is not None}
    world = LiveWorld(root=queue_path, disk_roots={NODE: queue_path}, bind=bind)

    async def main(_control: Runtime) -> None:
        # imported here: `lab --help` should not load the server
        from lab.backends.kestrel.admin import KestrelAdmin
        from lab.backends.kestrel.node import boot_kestrel

        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        on_signals(loop, stop.set)  # a clean stop; `lab serve` then ends as interrupted (130)
        made: list["QueueCollection"] = []

        def reload() -> None:
            if args.config:
                made[0].reload(load_config(args.config))

        async def boot(rt: Runtime) -> None:
            made.append(await boot_kestrel(rt, config, on_shutdown=stop.set, on_reload=reload,
                                           memory_budget=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")))

        await world.start(NODE, boot)
        collection = made[0]
        ports = {name: number for (_, name), number in world.listening.items()}
        admin = KestrelAdmin(collection)
        if config.admin_port is not None:
            ports["admin"] = await admin.start(config.listen_address, config.admin_port)
        ready(ready_line("kestrel", ports))
        try:
            await stop.wait()
        finally:
            await admin.stop()
            await world.node(NODE).net.close()  # no request runs on a closed collection
            collection.close()

    world.run(main)
