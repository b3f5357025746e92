"""beanstalkd as a peer: ``beanstalkd`` (Debian's ``beanstalkd`` package) with its binlog in
the node's data dir (``-b``), one tube per queue; the runner's client speaks beanstalkd's
text protocol (``doc/protocol.txt``) itself over asyncio streams — no asyncio client is
installed, and the protocol is a line per command.

put is ``use q`` once, then ``put 0 0 TTR n`` and the body (``INSERTED id``). A reliable get
is ``reserve-with-timeout``: the job stays reserved to this connection until ``delete id``
(the ack) or ``release id 0 0``, which puts it back in the ready heap by (priority, id) — at
the head again, as every job here has priority 0. The job's time-to-run (``ttr``) is the
lease: the server releases a job its consumer did not settle within it. A plain get is a
reserve and a ``delete`` at once, before the body is handed out: at most once.

``reserve-with-timeout`` counts whole seconds, so a get shorter than one second polls with
``reserve-with-timeout 0``.

What it promises is its documentation's (``man beanstalkd`` 1.12, ``doc/protocol.txt``) and
its code's (``walg.c``): every put, delete and release is written to the binlog before the
reply; ``-f 0`` fsyncs it before every reply; ``-f MS`` fsyncs only when a write comes MS or
more after the last fsync — there is no timer, so a burst's tail stays unsynced until the
next write, however long that takes (the manual's "loss of up to ms milliseconds of history"
bounds history between fsyncs, not time); ``-F`` never fsyncs. A kill -9 loses nothing: the
kernel's page cache keeps the binlog. But a job's record is four writes into a file
preallocated with zeros, and the replay checks no sum: a kill between the job's struct and
its body replays a job whose body is zeros (``file.c``), which the checker reports as a
message never sent (``?zeros-N``). Reservations are not logged: after any restart every
reserved job is ready again; a closed connection releases its reservations at once.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
from typing import Any, Mapping

from lab.design import TIMEOUT, About, Delivery, Option, Parts, QueueClient, Rejected, Runtime, Unreachable, whole
from lab.design.peer import Launch, Peer, Place
from lab.peers.beanstalkd.promises import PROMISED, parse_fsync

PRIORITY = 0  # every job alike: the ready heap is then FIFO by id
POLL_S = 0.002  # between polls of a get shorter than reserve-with-timeout's one second
#: replies by which the server says it did not do the command (doc/protocol.txt)
REFUSALS = frozenset({b"OUT_OF_MEMORY", b"INTERNAL_ERROR", b"BAD_FORMAT", b"UNKNOWN_COMMAND", b"EXPECTED_CRLF",
                      b"JOB_TOO_BIG", b"DRAINING", b"NOT_FOUND", b"NOT_IGNORED"})
#: replies followed by a chunk of data of the size their last word says
WITH_DATA = frozenset({b"RESERVED", b"FOUND", b"OK"})


def fsync_flags(fsync: int | str) -> list[str]:
    """beanstalkd's flags for ``fsync``."""
    return ["-F"] if fsync == "never" else ["-f", str(fsync)]


def listening(port: int) -> bool:
    """Does the server accept connections on ``port``? (It replays its binlog first.)"""
    with socket.create_connection(("127.0.0.1", port), timeout=0.5):
        return True


class Wire:
    """One connection speaking beanstalkd's protocol: a command line (and a body), a reply
    line (and its data). A command that does not complete drops the connection — its reply
    may still come and must never be read as the next command's — which makes the server
    release what this connection had reserved."""

    def __init__(self, address: tuple[str, int], timeout: float):
        self.address, self.timeout = address, timeout
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.generation = 0  # connections made: a new one uses and watches nothing yet

    @property
    def connected(self) -> bool:
        return self.writer is not None

    async def connect(self) -> None:
        try:
            self.reader, self.writer = await asyncio.wait_for(asyncio.open_connection(*self.address), self.timeout)
        except (OSError, asyncio.TimeoutError) as e:  # nothing was sent
            raise Unreachable(f"beanstalkd at {self.address[0]}:{self.address[1]}: {e!r}") from e
        self.generation += 1

    async def call(self, line: bytes, body: bytes | None = None, wait: float = 0.0) -> tuple[list[bytes], bytes | None]:
        """Send ``line`` (and ``body``); the reply's words and data. ``wait``: how long the
        server may hold the reply on purpose (a reserve), added to the timeout."""
        if self.writer is None:
            await self.connect()
        try:
            return await asyncio.wait_for(self._exchange(line, body), self.timeout + wait)
        except BaseException:  # a timeout, a cut connection, a cancelled task: out of step now
            self.drop()
            raise

    async def _exchange(self, line: bytes, body: bytes | None) -> tuple[list[bytes], bytes | None]:
        assert self.reader is not None and self.writer is not None
        self.writer.write(line + b"\r\n" + (b"" if body is None else body + b"\r\n"))
        await self.writer.drain()
        words = (await self.reader.readuntil(b"\r\n"))[:-2].split()
        if not words:
            raise ConnectionError(f"{line.decode(errors='replace')}: an empty reply")
        data = None
        if words[0] in WITH_DATA:
            size = int(words[-1])
            data = (await self.reader.readexactly(size + 2))[:-2]
        return words, data

    def drop(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def close(self) -> None:
        writer, self.reader, self.writer = self.writer, None, None
        if writer is not None:
            try:
                writer.close()
                await writer.wait_closed()
            except Exception:  # a connection a fault cut: nothing to close cleanly
                pass


def expect(command: bytes, words: list[bytes], *expected: bytes) -> None:
    """The reply is one of ``expected``; else Rejected for a refusal, RuntimeError (outcome
    unknown) for anything else — ``BURIED`` after a put or a release, say: the job is kept but
    out of the ready heap."""
    if words[0] in expected:
        return
    reply = b" ".join(words).decode(errors="replace")
    if words[0] in REFUSALS:
        raise Rejected(f"{command.decode(errors='replace')}: {reply}")
    raise RuntimeError(f"{command.decode(errors='replace')}: unexpected reply {reply!r}")


class BeanstalkdClient(QueueClient):
    """One connection; the tube it uses and the one it watches follow the queue of each call."""

    def __init__(self, peer: "BeanstalkdPeer", rt: Runtime, reliable: bool):
        self.rt, self.reliable = rt, reliable
        self.ttr = peer.options["ttr"]
        self.wire = Wire(peer.address(rt), peer.options["timeout"])
        self.used: tuple[int, str] | None = None
        self.watched: tuple[int, str] | None = None

    async def _tube(self, queue: str, watch: bool) -> None:
        """Use (or watch, alone) ``queue`` on the current connection. A failure here leaves
        the command itself unsent: a definite fail (Unreachable), unless the server refused."""
        try:
            if not self.wire.connected:
                await self.wire.connect()
            generation = self.wire.generation
            if not watch and self.used != (generation, queue):
                words, _ = await self.wire.call(b"use " + queue.encode())
                expect(b"use", words, b"USING")
                self.used = (generation, queue)
            if watch and self.watched != (generation, queue):
                words, _ = await self.wire.call(b"watch " + queue.encode())
                expect(b"watch", words, b"WATCHING")
                old = self.watched[1] if self.watched and self.watched[0] == generation else "default"
                if old != queue:
                    words, _ = await self.wire.call(b"ignore " + old.encode())
                    expect(b"ignore", words, b"WATCHING")
                self.watched = (generation, queue)
        except (Rejected, Unreachable):
            raise
        except Exception as e:
            raise Unreachable(f"beanstalkd: setting up the tube {queue!r} failed ({e!r}); the command was not sent") \
                from e

    async def put(self, queue: str, body: bytes) -> None:
        await self._tube(queue, watch=False)
        command = b"put %d 0 %d %d" % (PRIORITY, self.ttr, len(body))
        words, _ = await self.wire.call(command, body)
        expect(b"put", words, b"INSERTED")

    async def get(self, queue: str, wait: float) -> Delivery | None:
        await self._tube(queue, watch=True)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, wait)
        while True:
            remaining = deadline - loop.time()
            seconds = int(remaining) if remaining >= 1 else 0  # the server counts whole seconds
            words, body = await self.wire.call(b"reserve-with-timeout %d" % seconds, wait=seconds)
            if words[0] == b"RESERVED":
                break
            # DEADLINE_SOON: a job this connection holds is in its last second; nothing reserved
            expect(b"reserve-with-timeout", words, b"TIMED_OUT", b"DEADLINE_SOON")
            if loop.time() + POLL_S > deadline:
                return None
            await asyncio.sleep(POLL_S)
        job = int(words[1])
        assert body is not None
        if self.reliable:
            return Delivery(queue, body, job)
        words, _ = await self.wire.call(b"delete %d" % job)  # taken for good before it is handed out
        expect(b"delete", words, b"DELETED")
        return Delivery(queue, body, None)

    async def ack(self, delivery: Delivery) -> None:
        words, _ = await self.wire.call(b"delete %d" % delivery.token)
        # NOT_FOUND: its time-to-run ran out (or its connection closed) and another consumer has it
        expect(b"delete", words, b"DELETED")

    async def release(self, delivery: Delivery) -> None:
        words, _ = await self.wire.call(b"release %d %d 0" % (delivery.token, PRIORITY))
        expect(b"release", words, b"RELEASED")

    async def backlog(self, queue: str) -> int | None:
        """Jobs in the tube that a consumer may still get: ready, delayed and reserved (a
        reservation of a consumer that is gone ends with its time-to-run); buried ones never
        come back by themselves, so they do not count."""
        words, data = await self.wire.call(b"stats-tube " + queue.encode())
        if words[0] == b"NOT_FOUND":  # no job and no client refers to it: the tube is gone
            return 0
        expect(b"stats-tube", words, b"OK")
        stats = dict(line.split(b": ", 1) for line in (data or b"").splitlines() if b": " in line)
        return sum(int(stats.get(b"current-jobs-" + state, 0)) for state in (b"ready", b"delayed", b"reserved"))

    async def close(self) -> None:
        await self.wire.close()


class BeanstalkdPeer(Peer):
    name = "beanstalkd"
    parts = Parts(load="lab.peers.beanstalkd.load")
    about = About("beanstalkd tubes (put, reserve, delete, release; the job's time-to-run as the lease), binlog",
                  colour="#000080")
    promised = PROMISED
    binary, package = "beanstalkd", "beanstalkd"
    ports = ("beanstalkd",)
    node = "beanstalkd"
    options_declared = (
        TIMEOUT,
        Option("fsync", "when the binlog is fsynced (-f MS: when a write comes MS ms or more after the last "
               "fsync; -f 0: before every reply; -F: never)", "0, a whole number of milliseconds, or never",
               parse_fsync, 50),
        Option("ttr", "each job's time-to-run: how long a reserved job stays with its consumer before the server "
               "releases it (the lease)", "a whole number of seconds >= 1", whole(1), 2),
    )

    def __init__(self, world: Any, options: Mapping[str, Any] | None = None):
        super().__init__(world, options)
        # a reservation held by a connection a partition keeps open ends only with its ttr
        self.recovery_s = self.options["ttr"] + 1.0

    def launch(self, place: Place) -> Launch:
        port = place.ports["beanstalkd"]
        return Launch(
            [self.executable(), "-l", "127.0.0.1", "-p", str(port), "-b", str(place.data),
             *fsync_flags(self.options["fsync"])],
            ready=lambda: listening(port))

    def client(self, rt: Runtime, reliable: bool) -> BeanstalkdClient:
        return BeanstalkdClient(self, rt, reliable)

    def describe(self) -> Mapping[str, Any]:
        try:
            done = subprocess.run([self.executable(), "-v"], capture_output=True, text=True, timeout=5)
            return {"version": done.stdout.strip() or done.stderr.strip()}
        except Exception:  # the manifest goes without it
            return {}
