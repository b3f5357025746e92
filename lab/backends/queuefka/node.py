"""What a Queuefka server node boots, in either world: the broker over the node's disk,
its HTTP front on the node's ``http`` port, and the retention sweeps. The sim world runs it
on a simulated node; ``lab serve queuefka`` runs it on a live one."""

from __future__ import annotations

from lab.backends.queuefka.core.broker import QueuefkaCore
from lab.backends.queuefka.core.broker_api import Config
from lab.backends.queuefka.core.framing import DEFAULT_MAX_RECORD
from lab.backends.queuefka.wire.http import HEADER_TIMEOUT, accept_http
from lab.design import Runtime


async def boot_queuefka(rt: Runtime, config: Config, *, max_payload: int = DEFAULT_MAX_RECORD,
                        header_timeout: float = HEADER_TIMEOUT) -> QueuefkaCore:
    """Open the broker on ``rt``'s disk (one folder per topic at its root) and serve HTTP; the broker."""
    core = QueuefkaCore(rt, config)
    await rt.net.listen("http", accept_http(core, max_payload=max_payload, header_timeout=header_timeout))
    rt.spawn(core.run_retention(), name="retention")
    return core
