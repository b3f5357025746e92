"""The text protocol's commands on a Kestrel session (port 2222): ``+n``, ``-error``,
``:item`` and ``*`` replies. Every ``get`` confirms the connection's open reads on the
queue, then opens a new one; a disconnect aborts what is open.
"""

from __future__ import annotations

from typing import Awaitable, Callable

from lab.backends.kestrel.core.collection import VERSION, BadQueueName, QueueCollection
from lab.backends.kestrel.wire.protocol import TEXT_NONE, TextRequest, java_int, text_count, text_error, text_item
from lab.backends.kestrel.core.session import STATUSES, Session, Unavailable

Send = Callable[[bytes], Awaitable[None]]


class TextHandler:
    def __init__(self, session: Session, on_shutdown: Callable[[], None] | None = None):
        self.session = session
        self.collection: QueueCollection = session.collection
        self.on_shutdown = on_shutdown

    async def handle(self, request: TextRequest, send: Send) -> bool:
        command = getattr(self, f"cmd_{request.command}", None) if request.command.isidentifier() else None
        if command is None:
            await send(text_error(f"Unknown command: {request.command}"))
            return True
        try:
            return await command(request, send) is not False
        except Unavailable as e:
            await send(text_error(f"Server not available for operation {e}"))
            return True
        except BadQueueName as e:
            await send(text_error(str(e)))
            return True

    def _queue(self, request: TextRequest) -> str:
        if not request.args or not request.args[0]:
            raise LookupError
        return request.args[0]

    async def _needs_queue(self, send: Send) -> bool:
        await send(text_error("Queue name required."))
        return True

    async def cmd_put(self, request: TextRequest, send: Send) -> bool:
        if not request.args or not request.args[0]:
            return await self._needs_queue(send)
        queue = request.args[0]
        expiry = 0
        if len(request.args) > 1:
            try:
                expiry = self.collection.now_ms() + java_int(request.args[1])
            except ValueError:
                await send(text_error("Error parsing expiration time."))
                return True
        self.session.check_write("put")
        stored = 0
        for item in request.items or []:
            if not self.collection.add(queue, item, expiry):
                break
            stored += 1
        await self.collection.settle(queue)
        await send(text_count(stored))
        return True

    async def _read(self, request: TextRequest, send: Send, peek: bool) -> bool:
        if not request.args or not request.args[0]:
            return await self._needs_queue(send)
        queue = request.args[0]
        timeout = None
        if len(request.args) > 1:
            try:
                timeout = java_int(request.args[1])
            except ValueError:
                await send(text_error("Error parsing timeout."))
                return True
        self.session.check_read("peek" if peek else "get")
        self.session.confirm_oldest(queue, self.session.count_open(queue))
        if not peek and self.session.count_open(queue) >= self.session.max_open:
            await send(text_error(f"Too many open transactions; limit={self.session.max_open}"))
            return True
        got = await self.collection.remove(queue, timeout, transaction=not peek, peek=peek)
        if got is not None and not peek:
            self.session.record_open(queue, got[0])
        await self.collection.settle(queue)
        await send(TEXT_NONE if got is None else text_item(got[1].data))
        return True

    async def cmd_get(self, request: TextRequest, send: Send) -> bool:
        return await self._read(request, send, peek=False)

    async def cmd_peek(self, request: TextRequest, send: Send) -> bool:
        return await self._read(request, send, peek=True)

    async def cmd_monitor(self, request: TextRequest, send: Send) -> bool:
        if len(request.args) < 2:
            await send(text_error("Queue name & timeout required."))
            return True
        queue = request.args[0]
        try:
            timeout_ms = java_int(request.args[1])
        except ValueError:
            await send(text_error("Error parsing timeout."))
            return True
        self.session.check_read("monitor")
        self.session.confirm_oldest(queue, self.session.count_open(queue))
        deadline = self.collection.rt.now() + timeout_ms / 1000
        while self.session.count_open(queue) < self.session.max_open:
            remaining = int((deadline - self.collection.rt.now()) * 1000)
            if remaining <= 0:
                break
            got = await self.collection.remove(queue, remaining, transaction=True)
            if got is None:
                break
            self.session.record_open(queue, got[0])
            await self.collection.settle(queue)
            await send(text_item(got[1].data))
        await send(TEXT_NONE)
        return True

    async def cmd_confirm(self, request: TextRequest, send: Send) -> bool:
        if not request.args or not request.args[0]:
            return await self._needs_queue(send)
        queue = request.args[0]
        try:
            count = java_int(request.args[1]) if len(request.args) > 1 else 1
        except ValueError:
            await send(text_error("Error parsing count."))
            return True
        if count < 0 or count > self.session.count_open(queue):
            await send(text_error("Not that many transactions open."))
            return True
        self.session.confirm_oldest(queue, count)
        await self.collection.settle(queue)
        await send(text_count(count))
        return True

    async def cmd_flush(self, request: TextRequest, send: Send) -> bool:
        if not request.args or not request.args[0]:
            return await self._needs_queue(send)
        self.session.check_write("flush")
        self.collection.flush(request.args[0])
        await send(text_count(0))
        return True

    async def cmd_delete(self, request: TextRequest, send: Send) -> bool:
        if not request.args or not request.args[0]:
            return await self._needs_queue(send)
        self.session.check_write("delete")
        self.collection.delete(request.args[0])
        await send(text_count(0))
        return True

    async def cmd_status(self, request: TextRequest, send: Send) -> bool:
        if not request.args:
            await send(text_item(self.collection.status.encode()))
            return True
        wanted = request.args[0].upper()
        if wanted not in STATUSES:
            await send(text_error("Unknown status."))
            return True
        self.collection.status = wanted
        await send(text_count(0))
        return True

    async def cmd_version(self, request: TextRequest, send: Send) -> bool:
        await send(text_item(VERSION.encode()))
        return True

    async def cmd_quit(self, request: TextRequest, send: Send) -> bool:
        return False

    async def cmd_shutdown(self, request: TextRequest, send: Send) -> bool:
        await send(text_count(0))
        if self.on_shutdown is not None:
            self.on_shutdown()
        return False
