"""CassieQ's stores outside the core: SQLite and PostgreSQL, and ``open_store`` to pick one
by URL (the in-memory store is the core's own, ``core.memory_store``)."""

from __future__ import annotations

from lab.backends.cassieq.core.store import CassStore
from lab.backends.cassieq.stores.urls import ACCEPTED, StoreUrl, parse_store_url


def open_store(url: str, *, timeout_s: float = 5.0) -> CassStore:
    """The store ``url`` names (``memory:``, ``sqlite:///path.db`` or a bare path,
    ``postgresql://...``), its tables created if missing. ``timeout_s`` bounds waiting for
    SQLite's write lock or for a PostgreSQL connection. A PostgreSQL store connects on its
    first statement."""
    where = parse_store_url(url)
    if where.kind == "memory":
        from lab.backends.cassieq.core.memory_store import MemoryStore
        return MemoryStore()
    if where.kind == "sqlite":
        from lab.backends.cassieq.stores.sqlite import SQLiteStore
        return SQLiteStore(where.target, busy_timeout_s=timeout_s)
    from lab.backends.cassieq.stores.postgres import PostgresStore
    return PostgresStore(where.target, connect_timeout_s=timeout_s)


__all__ = ["ACCEPTED", "StoreUrl", "open_store", "parse_store_url"]
