"""A real PostgreSQL for CassieQ's store tests: one server per test session (pgserver's
self-contained PostgreSQL 16 on a temporary data directory, deleted at the end) and a
fresh database per test."""

from __future__ import annotations

import itertools
import tempfile
import warnings
from typing import Iterator
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

_databases = itertools.count()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """The URI of a running PostgreSQL server's ``postgres`` database."""
    data = tempfile.mkdtemp(prefix="cassieq-pg-")
    with warnings.catch_warnings():
        # platformdirs, on import: no XDG_RUNTIME_DIR here, it falls back to /tmp
        warnings.simplefilter("ignore")
        import pgserver

        server = pgserver.get_server(data, cleanup_mode="delete")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


def database_url(server_uri: str, name: str) -> str:
    return urlunsplit(urlsplit(server_uri)._replace(path=f"/{name}"))


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """The URL of a new, empty database on the session's server, dropped after the test."""
    name = f"cassieq_{next(_databases)}"
    with psycopg.connect(pg_server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield database_url(pg_server, name)
    finally:
        with psycopg.connect(pg_server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
