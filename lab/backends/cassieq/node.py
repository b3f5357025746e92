"""What a CassieQ API node boots, in either world: the queue API and the admin API on the
node's ``http`` and ``admin`` ports (``lab.design.http``), over a store, and its share of the
repair workers. The sim world runs it on a simulated node over the simulated Cassandra;
``lab serve cassieq`` runs it on a live one over SQLite or PostgreSQL."""

from __future__ import annotations

import json
from dataclasses import dataclass

from lab.backends.cassieq.core.accounts import Accounts, RandomBytes
from lab.backends.cassieq.core.auth import DEFAULT_SKEW_MS
from lab.backends.cassieq.core.repair_manager import DEFAULT_REFRESH_SECONDS, RepairManager
from lab.backends.cassieq.core.store import CassStore
from lab.backends.cassieq.wire.admin import AdminApi
from lab.backends.cassieq.wire.api import QueueApi
from lab.backends.cassieq.wire.openapi import document
from lab.design import Runtime
from lab.design import HttpServerConnection, Request, Response, Router

HEADER_TIMEOUT = 10.0
MAX_BODY = 16 * 1024 * 1024  # a message, or a create request


@dataclass
class CassieqNode:
    api: QueueApi
    admin: AdminApi
    repair: RepairManager


def api_router(api: QueueApi) -> Router:
    """The queue API's routes and ``/openapi.json``."""
    router = Router()
    api.add_routes(router)
    served = json.dumps(document(api.routes())).encode()

    async def openapi(_: Request) -> Response:
        return Response(200, served, {"Content-Type": "application/json"})

    router.get("/openapi.json", openapi)
    return router


async def boot_cassieq(rt: Runtime, store: CassStore, *, index: int = 0, count: int = 1,
                       key_random: RandomBytes | None = None, skew_ms: int = DEFAULT_SKEW_MS,
                       header_timeout: float = HEADER_TIMEOUT, admin: bool = True,
                       repair_refresh: float = DEFAULT_REFRESH_SECONDS) -> CassieqNode:
    """Serve the APIs of API node ``index`` of ``count`` over ``store``. ``key_random`` makes
    account keys (a live server passes the OS's secure source; the sim's seeded one makes
    them reproducible there)."""
    accounts = Accounts(store, key_random or rt.random)
    api = QueueApi(rt, store, accounts, skew_ms=skew_ms)
    admin_api = AdminApi(rt, store, accounts)
    router = api_router(api)
    await rt.net.listen("http", lambda: HttpServerConnection(router, max_body=MAX_BODY, header_timeout=header_timeout))
    if admin:
        admin_router = Router()
        admin_api.add_routes(admin_router)
        await rt.net.listen("admin", lambda: HttpServerConnection(admin_router, max_body=MAX_BODY,
                                                                   header_timeout=header_timeout))
    repair = RepairManager(store, rt, index, count, repair_refresh)
    rt.spawn(repair.run(), name="repair manager")
    return CassieqNode(api, admin_api, repair)

