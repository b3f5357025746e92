"""The memcache protocol's commands on a Kestrel session: exact response lines, GET
options, MONITOR/CONFIRM, and the original's malformed-input behaviour.

``MemcacheHandler.handle(request, send)`` interprets one request, writes its response
through ``send`` (several times for a monitor stream) and returns whether the connection
stays open. Errors map as in the original: a missing argument is ``CLIENT_ERROR`` (kept
open), a non-numeric number or an illegal queue name drops the connection, an unknown
command is ``CLIENT_ERROR`` and closes it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Awaitable, Callable

from lab.backends.kestrel.core.collection import VERSION, BadQueueName, QueueCollection
from lab.backends.kestrel.wire.protocol import (BINARY_REQUEST, END, MemcacheRequest, binary_unknown_command, java_int,
                                          memcache_line, memcache_value)
from lab.backends.kestrel.core.session import STATUSES, Session, Unavailable

log = logging.getLogger(__name__)
Send = Callable[[bytes], Awaitable[None]]
RELATIVE_EXPTIME_LIMIT = 1_000_000  # below: seconds from now; above: unix seconds


class Drop(Exception):
    """Close the connection without a reply."""


@dataclass
class GetOptions:
    queue: str
    timeout_ms: int | None = None
    open: bool = False
    close: bool = False
    abort: bool = False
    peek: bool = False
    unknown: list[str] = field(default_factory=list)  # ignored options (``opne``): counted in the stats


def parse_get_key(key: str) -> GetOptions:
    """``queue/opt/opt...``; ValueError for a bad ``t=``; LookupError for a forbidden mix."""
    queue, *options = key.split("/")
    got = GetOptions(queue)
    for option in options:
        if option.startswith("t="):
            got.timeout_ms = java_int(option[2:])
        elif option in ("open", "close", "abort", "peek"):
            setattr(got, option, True)
        elif option:
            got.unknown.append(option)  # ignored, as the original: ``q/opne`` reads like ``q``
    if not queue:
        raise LookupError("empty queue name")
    if got.peek and (got.open or got.close or got.abort) or got.abort and (got.open or got.close):
        raise LookupError("forbidden option combination")
    return got


#: ``parse_get_key`` per key, shared: a client repeats a handful of keys, and the options
#: are only read (a bad key raises, and raising is not cached).
_get_options = lru_cache(maxsize=1024)(parse_get_key)


class MemcacheHandler:
    """Commands of one memcache connection."""

    def __init__(self, session: Session, on_shutdown: Callable[[], None] | None = None,
                 on_reload: Callable[[], None] | None = None):
        self.session = session
        self.collection: QueueCollection = session.collection
        self.on_shutdown = on_shutdown
        self.on_reload = on_reload
        self._commands = {name[4:]: getattr(self, name) for name in dir(self) if name.startswith("cmd_")}

    async def handle(self, request: MemcacheRequest, send: Send) -> bool:
        """Run ``request``; False when the connection must close (after what was sent)."""
        if request.command == BINARY_REQUEST:
            log.info("a memcache binary-protocol client: answered unknown command, closing")
            await send(binary_unknown_command(request.data or b""))
            return False
        command = self._commands.get(request.command)
        if command is None:
            await send(memcache_line("CLIENT_ERROR"))
            return False
        if not request.terminator_ok and not self.collection.config.unchecked_data_terminator:
            # a value longer (or shorter) than its byte count: storing the first N bytes
            # would keep a truncated value, and the rest would be read as a command
            await send(memcache_line("CLIENT_ERROR"))
            return False
        try:
            result = await command(request, send)
        except IndexError:
            await send(memcache_line("CLIENT_ERROR"))
            return True
        except Unavailable:
            await send(memcache_line("SERVER_ERROR"))
            return False
        except BadQueueName as e:
            log.info("dropping a connection: %s", e)  # the original's answer to an illegal name
            return False
        except (ValueError, Drop):
            return False  # a bad number: the original drops the connection
        return result is not False

    def _exptime_ms(self, text: str) -> int:
        exptime = java_int(text)
        if exptime == 0:
            return 0
        if exptime < RELATIVE_EXPTIME_LIMIT:
            return self.collection.now_ms() + exptime * 1000
        return exptime * 1000

    # ------------------------------------------------------------------ storage
    async def cmd_set(self, request: MemcacheRequest, send: Send) -> bool:
        args = request.args
        try:
            java_int(args[1])  # flags: parsed, then discarded
        except ValueError:
            await send(memcache_line("CLIENT_ERROR"))
            return True
        expiry = self._exptime_ms(args[2])
        self.session.check_write("set")
        assert request.data is not None
        ok = self.collection.add(args[0], request.data, expiry)
        await self.collection.settle(args[0])  # syncJournal = every write: reply after the fsync
        await send(memcache_line("STORED" if ok else "NOT_STORED"))
        return True

    async def _unsupported_storage(self, request: MemcacheRequest, send: Send) -> bool:
        await send(memcache_line("CLIENT_ERROR"))
        return False

    cmd_add = cmd_replace = cmd_append = cmd_prepend = cmd_cas = _unsupported_storage

    # ------------------------------------------------------------------ reads
    async def cmd_get(self, request: MemcacheRequest, send: Send) -> bool:
        key = request.args[0]  # only the first key is used
        try:
            options = _get_options(key)
        except LookupError:
            await send(memcache_line("CLIENT_ERROR"))
            return False
        queue, session = options.queue, self.session
        if options.unknown:
            self.collection.stats.get_unknown_option += 1  # a typo turns a reliable read lossy: show it
        if options.abort:
            session.abort_oldest(queue)
            await self.collection.settle(queue)
            await send(END)
            return True
        session.check_read("get")
        if options.close:
            session.confirm_oldest(queue)
            if not options.open:
                await self.collection.settle(queue)
                await send(END)
                return True
        if session.count_open(queue) and not (options.open or options.peek):
            await send(memcache_line("ERROR"))
            return False  # a plain get with an open read: the close aborts it
        if options.open and session.count_open(queue) >= session.max_open:
            await send(memcache_line("ERROR"))
            return False
        got = await self.collection.remove(queue, options.timeout_ms, transaction=options.open, peek=options.peek)
        if got is not None and options.open:
            session.record_open(queue, got[0])
        await self.collection.settle(queue)
        await send(END if got is None else memcache_value(queue, got[1].data))
        return True

    cmd_gets = cmd_get

    async def cmd_monitor(self, request: MemcacheRequest, send: Send) -> bool:
        queue, seconds = request.args[0], java_int(request.args[1])
        limit = java_int(request.args[2]) if len(request.args) > 2 else self.session.max_open
        self.session.check_read("monitor")
        self.collection.stats.cmd_monitor += 1
        deadline = self.collection.rt.now() + seconds
        delivered = 0
        while delivered < limit and self.session.count_open(queue) < self.session.max_open:
            remaining_ms = int((deadline - self.collection.rt.now()) * 1000)
            if remaining_ms <= 0:
                break
            got = await self.collection.remove(queue, remaining_ms, transaction=True)
            if got is None:
                break
            self.collection.stats.cmd_monitor_get += 1
            self.session.record_open(queue, got[0])
            delivered += 1
            await self.collection.settle(queue)
            await send(memcache_value(queue, got[1].data))
        await send(END)
        return True

    async def cmd_confirm(self, request: MemcacheRequest, send: Send) -> bool:
        queue, count = request.args[0], java_int(request.args[1])
        if count <= 0 or count > self.session.count_open(queue):
            await send(memcache_line("ERROR"))
            return True
        self.session.confirm_oldest(queue, count)
        await self.collection.settle(queue)
        await send(END)
        return True

    # ------------------------------------------------------------------ admin
    async def cmd_delete(self, request: MemcacheRequest, send: Send) -> bool:
        name = request.args[0]
        self.session.check_write("delete")
        self.collection.delete(name)
        await send(memcache_line("DELETED"))
        return True

    async def cmd_flush(self, request: MemcacheRequest, send: Send) -> bool:
        name = request.args[0]
        self.session.check_write("flush")
        self.collection.flush(name)
        await self.collection.settle()
        await send(END)
        return True

    async def cmd_flush_all(self, request: MemcacheRequest, send: Send) -> bool:
        self.session.check_write("flush_all")
        self.collection.flush_all()
        await self.collection.settle()
        await send(memcache_line("Flushed all queues."))
        return True

    async def cmd_flush_expired(self, request: MemcacheRequest, send: Send) -> bool:
        name = request.args[0]
        self.session.check_write("flush_expired")
        await send(memcache_line(str(self.collection.flush_expired(name))))
        return True

    async def cmd_flush_all_expired(self, request: MemcacheRequest, send: Send) -> bool:
        await send(memcache_line(str(self.collection.flush_all_expired())))
        return True

    async def cmd_stats(self, request: MemcacheRequest, send: Send) -> bool:
        lines = [f"STAT {k} {v}" for k, v in self.collection.global_stats()]
        for name in self.collection.names():
            lines += [f"STAT queue_{name}_{k} {v}" for k, v in self.collection.queue_stats(name)]
        for alias in sorted(self.collection.config.aliases):
            lines += [f"STAT queue_{alias}_{k} {v}" for k, v in self.collection.queue_stats(alias)]
        await send(b"".join(memcache_line(line) for line in lines) + END)
        return True

    async def cmd_dump_stats(self, request: MemcacheRequest, send: Send) -> bool:
        names = request.args or self.collection.names()
        blocks = []
        for name in names:
            stats = self.collection.queue_stats(name)
            body = [f"  {k}={v}" for k, v in stats] or ["  "]
            blocks.append("\r\n".join([f"queue '{name}' {{", *body, "}"]))
        await send(memcache_line("\r\n".join(blocks)) + END)
        return True

    async def cmd_version(self, request: MemcacheRequest, send: Send) -> bool:
        await send(memcache_line(f"VERSION {VERSION}"))
        return True

    async def cmd_status(self, request: MemcacheRequest, send: Send) -> bool:
        if not request.args:
            await send(memcache_line(self.collection.status))
            return True
        wanted = request.args[0].upper()
        if wanted not in STATUSES:
            await send(memcache_line("CLIENT_ERROR"))
            return False
        self.collection.status = wanted
        await send(END)
        return True

    async def cmd_reload(self, request: MemcacheRequest, send: Send) -> bool:
        if self.on_reload is not None:
            self.on_reload()
        await send(memcache_line("Reloaded config."))
        return True

    async def cmd_shutdown(self, request: MemcacheRequest, send: Send) -> bool:
        if self.on_shutdown is not None:
            self.on_shutdown()
        return False

    async def cmd_quit(self, request: MemcacheRequest, send: Send) -> bool:
        return False
