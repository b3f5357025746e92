"""What a Kestrel server node boots, in either world: its queue collection over the node's
disk, the memcache and text ports on the node's network, and the collection's timers.
The sim world runs it on a simulated node; ``lab serve kestrel`` runs it on a live one."""

from __future__ import annotations

from typing import Callable

from lab.backends.kestrel.config import ServerConfig
from lab.backends.kestrel.core.collection import QueueCollection
from lab.backends.kestrel.wire.connection import accept_memcache, accept_text
from lab.design import Runtime
from lab.design import RuntimeStore


async def boot_kestrel(rt: Runtime, config: ServerConfig, *, memory_budget: int = 1 << 30,
                       on_shutdown: Callable[[], None] | None = None,
                       on_reload: Callable[[], None] | None = None) -> QueueCollection:
    """Open the queues on ``rt``'s disk (one journal per queue at its root) and listen on the
    ports the config enables; the collection."""
    collection = QueueCollection(rt, config, RuntimeStore(rt, "."), memory_budget=memory_budget)
    if config.memcache_port is not None:
        await rt.net.listen("memcache", accept_memcache(collection, config.max_open_transactions,
                                                        config.client_timeout, on_shutdown, on_reload))
    if config.text_port is not None:
        await rt.net.listen("text", accept_text(collection, config.max_open_transactions,
                                                config.client_timeout, on_shutdown))
    rt.spawn(collection.run_timers(), name="kestrel timers")
    return collection
