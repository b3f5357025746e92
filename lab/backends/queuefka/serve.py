"""`lab serve queuefka`: the HTTP front as a standalone server over a data directory.

Topics are folders of ``D/<topic>/*.slab`` — the original's layout, so the original's
reader (or ``lab.backends.queuefka.Reader``) can read them directly. Ctrl-C or SIGTERM
stops it cleanly: buffered records are flushed (and fsynced unless the policy is never).
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from lab.design.worlds import on_signals
from lab.backends.queuefka.core.broker import QueuefkaCore
from lab.backends.queuefka.core.broker_api import Config
from lab.backends.queuefka.wire.http import HEADER_TIMEOUT
from lab.design.worlds import LiveWorld
from lab.design.worlds import ready_line
from lab.design import Runtime

NODE = "queuefka"


HELP = "Queuefka's HTTP front over a data directory"
#: the flag that sets each port of the ready line (lab.worlds.live.processes restarts on the same ports)
PORTS = {"http": "--port"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", type=int, default=8080, help="HTTP port (default 8080; 0 = any free port)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--data-dir", type=Path, required=True, help="folder holding one sub-folder per topic")
    p.add_argument("--fsync", default="never", help="never (the original), always, <N>ms or <N>records")
    p.add_argument("--segment-size", type=int, default=Config.segment_size_hint,
                   help="segment size hint in bytes (default 10 MiB)")
    p.add_argument("--retention", type=float, help="delete consumed segments older than this many seconds")
    p.add_argument("--retention-interval", type=float, default=Config.retention_interval,
                   help=f"seconds between retention sweeps (default {Config.retention_interval:g})")
    p.add_argument("--session-timeout", type=float, default=Config.session_timeout,
                   help="seconds before fetched, uncommitted records are handed out again "
                        f"(default {Config.session_timeout:g})")
    p.add_argument("--header-timeout", type=float, default=HEADER_TIMEOUT,
                   help=f"seconds a connection has to send a request's headers, and to stay idle (default {HEADER_TIMEOUT:g})")


def config_from(args: argparse.Namespace) -> Config:
    """The core's configuration; ValueError names the bad option."""
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port {args.port}: use 0 to 65535")
    if args.retention is not None and args.retention < 0:
        raise ValueError(f"--retention {args.retention}: use a number of seconds >= 0")
    for flag in ("retention_interval", "session_timeout"):
        if not getattr(args, flag) > 0:
            raise ValueError(f"--{flag.replace('_', '-')} {getattr(args, flag)}: use a number of seconds > 0")
    if not args.header_timeout > 0:
        raise ValueError(f"--header-timeout {args.header_timeout}: use a number of seconds > 0")
    try:
        return Config(segment_size_hint=args.segment_size, fsync=args.fsync, retention_age=args.retention,
                      retention_interval=args.retention_interval, session_timeout=args.session_timeout)
    except ValueError as e:
        raise ValueError(f"--fsync/--segment-size: {e}") from None


def serve(args: argparse.Namespace, ready=print) -> None:
    """Serve until interrupted; ``ready`` is told the ready line (lab.worlds.live.processes) once
    the port is open."""
    config = config_from(args)
    args.data_dir.mkdir(parents=True, exist_ok=True)
    world = LiveWorld(root=args.data_dir, disk_roots={NODE: args.data_dir}, bind={"http": (args.host, args.port)})

    async def main(_control: Runtime) -> None:
        from lab.backends.queuefka.node import boot_queuefka

        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        on_signals(loop, stop.set)  # a clean stop; `lab serve` then ends as interrupted (130)
        cores: list[QueuefkaCore] = []

        async def boot(rt: Runtime) -> None:
            cores.append(await boot_queuefka(rt, config, header_timeout=args.header_timeout))

        await world.start(NODE, boot)
        ready(ready_line("queuefka", {"http": world.listening[(NODE, "http")]}))
        try:
            await stop.wait()
        finally:
            await world.node(NODE).net.close()  # no request runs on a closed broker
            cores[0].close()

    world.run(main)
