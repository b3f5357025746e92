"""The power-loss file system's process: ``python -m lab.worlds.live.powerfs BACKING MOUNTPOINT
--control SOCKET`` mounts BACKING at MOUNTPOINT in the foreground and serves its control
socket, one request line and one reply line at a time:

    checkpoint  ->  ok                      everything so far is durable
    crash       ->  ok BYTES FILES          every unsynced write rolled back
    stats       ->  ok DIRTY_FILES DIRTY_BYTES
    delay NS    ->  ok                      every sync from now on takes NS nanoseconds longer

anything else gets ``error ...``. SIGTERM or SIGINT unmounts and exits (libfuse's own
handlers end its loop; ``PowerFs`` in ``mount.py`` is the parent that starts and stops it).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
from pathlib import Path

import mfusepy

from lab.worlds.live.powerfs.fs import PowerLossOperations
from lab.worlds.live.powerfs.undo import UndoLog

LOOP_ENDED = 8  # what libfuse's main returns when its loop ended (on a signal, too)
#: Without these the kernel's FUSE page and attribute caches served pre-crash data after a
#: rollback: every read and every stat must come to us.
MOUNT_OPTIONS = dict(direct_io=True, attr_timeout=0, entry_timeout=0, negative_timeout=0, use_ino=True)


def answer(log: UndoLog, request: str, ops: PowerLossOperations | None = None) -> str:
    """The reply line to one control request."""
    if request.startswith("delay ") and ops is not None and request[6:].isdigit():
        ops.sync_delay_s = int(request[6:]) / 1e9
        return "ok"
    if request == "checkpoint":
        log.checkpoint()
        return "ok"
    if request == "crash":
        undone, files = log.rollback()
        return f"ok {undone} {files}"
    if request == "stats":
        files, dirty = log.stats()
        return f"ok {files} {dirty}"
    return f"error unknown request {request!r} (checkpoint, crash, stats, delay NS)"


def _serve_client(log: UndoLog, conn: socket.socket, ops: PowerLossOperations | None) -> None:
    with conn, conn.makefile("rwb", buffering=0) as stream:
        for line in stream:
            try:
                reply = answer(log, line.decode().strip(), ops)
            except OSError as e:  # a rollback that could not write: say so, keep serving
                reply = f"error {e}"
            stream.write(reply.encode() + b"\n")


def serve_control(log: UndoLog, path: str, ops: PowerLossOperations | None = None) -> socket.socket:
    """Listen on the Unix socket ``path`` in a daemon thread; returns the listening socket."""
    if os.path.exists(path):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(8)

    def loop() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return  # closed at exit
            threading.Thread(target=_serve_client, args=(log, conn, ops), daemon=True).start()

    threading.Thread(target=loop, name="powerfs-control", daemon=True).start()
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.worlds.live.powerfs", description=__doc__.split("\n\n")[0])
    parser.add_argument("backing", type=Path)
    parser.add_argument("mountpoint", type=Path)
    parser.add_argument("--control", required=True, help="the control socket's path")
    args = parser.parse_args(argv)
    log = UndoLog()
    ops = PowerLossOperations(args.backing, log)
    server = serve_control(log, args.control, ops)
    options = dict(MOUNT_OPTIONS)
    if os.geteuid() == 0:
        options["allow_other"] = True  # a server run under another uid may use the mount too
    try:
        # libfuse installs its SIGTERM/SIGINT/SIGHUP handlers for the loop and unmounts on them.
        mfusepy.FUSE(ops, str(args.mountpoint), foreground=True,
                     fsname="powerfs", **options)
    except RuntimeError as e:
        # libfuse's main returns 8 when its loop ended on a signal as well as on a loop error;
        # after SIGTERM (the normal stop) that is no failure.
        if e.args != (LOOP_ENDED,):
            raise
    finally:
        server.close()
        if os.path.exists(args.control):
            os.unlink(args.control)
    return 0


if __name__ == "__main__":
    sys.exit(main())
