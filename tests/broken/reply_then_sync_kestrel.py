"""A deliberately broken design (``tests.broken``): Kestrel with
``syncJournal=always`` whose set writes its ``STORED`` reply and only then awaits the
journal's fsync — both steps in the same handler, in the wrong order ("reply, then make
durable"). It promises what Kestrel with ``syncJournal=always`` promises (no loss under a
crash), so a crash between a set's reply and its fsync breaks that promise. Over a live
socket the reply leaves at the send; a sim world that delivers a handler's output only
when the handler returns cannot tell it from the real Kestrel.
"""

from __future__ import annotations

from lab.backends.kestrel.core.collection import QueueCollection
from lab.backends.kestrel.driver import KestrelBackend
from lab.backends.kestrel.wire.connection import KestrelConnection
from lab.backends.kestrel.wire.memcache import MemcacheHandler, Send
from lab.backends.kestrel.wire.protocol import MemcacheParser, MemcacheRequest, java_int, memcache_line
from lab.runtime import Boot, Runtime
from lab.storage import RuntimeStore

NAME = "reply-then-sync-kestrel"


class ReplyThenSyncHandler(MemcacheHandler):
    """Kestrel's commands, with the bug in ``set``: the reply goes before the fsync."""

    async def cmd_set(self, request: MemcacheRequest, send: Send) -> bool:
        args = request.args
        try:
            java_int(args[1])
        except ValueError:
            await send(memcache_line("CLIENT_ERROR"))
            return True
        expiry = self._exptime_ms(args[2])
        self.session.check_write("set")
        assert request.data is not None
        ok = self.collection.add(args[0], request.data, expiry)
        await send(memcache_line("STORED" if ok else "NOT_STORED"))  # the bug: acknowledged first ...
        await self.collection.settle(args[0])  # ... and made durable after
        return True


class ReplyThenSyncBackend(KestrelBackend):
    name = NAME
    summary = "kestrel syncJournal=always that replies to a set before its fsync (a test's deliberate bug)"

    @classmethod
    def calibration_path(cls):  # noqa: ANN206
        return KestrelBackend.calibration_path()  # Kestrel's CPU model: the same timing as the real one

    def boot(self, node: str) -> Boot:
        config = self.config

        async def boot(rt: Runtime) -> None:
            collection = QueueCollection(rt, config, RuntimeStore(rt, "."))
            await rt.net.listen("memcache", lambda: KestrelConnection(
                collection, MemcacheParser(), ReplyThenSyncHandler, config.max_open_transactions,
                config.client_timeout))
            rt.spawn(collection.run_timers(), name="kestrel timers")

        return boot


BACKEND = ReplyThenSyncBackend
