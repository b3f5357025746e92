"""CassieQ's store contract: the same tests over the in-memory store, a SQLite file and a
real PostgreSQL server (tests/cassieq_pg.py), so the core can run on any of them.

Each test drives one store with ``asyncio.run``; the sharing tests open a second store on
the same file or database, as a second API process would.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Awaitable, Callable, Iterator
from urllib.parse import urlsplit

import psycopg
import pytest

from lab.backends.cassieq.core.memory_store import MemoryStore
from lab.backends.cassieq.core.store import SCHEMA, CassStore, Condition, StoreError
from lab.backends.cassieq.stores import ACCEPTED, open_store
from lab.backends.cassieq.stores.postgres import PostgresStore
from lab.backends.cassieq.stores.sqlite import SQLiteStore
from tests.cassieq_pg import pg_server, pg_url  # noqa: F401  (fixtures)

BUCKET = {"queueid": "acct:q_v0", "bucket_num": 0}
OTHER_BUCKET = {"queueid": "acct:q_v0", "bucket_num": 1}


def message_key(monoton: int, bucket: dict[str, Any] = BUCKET) -> dict[str, Any]:
    return {**bucket, "monoton": monoton}


def message(monoton: int, bucket: dict[str, Any] = BUCKET, **values: Any) -> dict[str, Any]:
    return {**message_key(monoton, bucket), "message": f"m{monoton}", "version": 0, "acked": False,
            "next_visible_on": 0, "delivery_count": 0, "tag": "t", **values}


def full_row(table: str, **values: Any) -> dict[str, Any]:
    return {column: values.get(column) for column in SCHEMA[table].columns}


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())


# -- the stores --------------------------------------------------------------------------------


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path) -> str:
    if request.param == "memory":
        return "memory:"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'cassieq.db'}"
    return request.getfixturevalue("pg_url")


@pytest.fixture(params=["sqlite", "postgresql"])
def shared_url(request: pytest.FixtureRequest, tmp_path) -> str:
    """A store two processes can share."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'cassieq.db'}"
    return request.getfixturevalue("pg_url")


@pytest.fixture
def store(store_url: str) -> Iterator[CassStore]:
    opened = open_store(store_url)
    try:
        yield opened
    finally:
        opened.close()


# -- rows ----------------------------------------------------------------------------------------


def test_insert_then_read_gives_every_column(store: CassStore) -> None:
    async def body() -> None:
        assert await store.insert("message", message(5)) is True
        assert await store.read("message", message_key(5)) == full_row("message", **message(5))

    run(body)


def test_insert_is_an_upsert_of_the_given_columns(store: CassStore) -> None:
    async def body() -> None:
        await store.insert("message", message(5))
        assert await store.insert("message", {**message_key(5), "version": 3, "tag": None}) is True
        row = await store.read("message", message_key(5))
        assert row == full_row("message", **message(5, version=3, tag=None))

    run(body)


def test_read_of_a_missing_row_or_partition_is_empty(store: CassStore) -> None:
    async def body() -> None:
        await store.insert("message", message(1))
        assert await store.read("message", message_key(2)) is None
        assert await store.read("queue", {"account_name": "a", "queuename": "q"}) is None
        assert await store.read_partition("message", OTHER_BUCKET) == []

    run(body)


def test_read_partition_orders_by_clustering_with_the_marker_rows_first(store: CassStore) -> None:
    async def body() -> None:
        for monoton in (7, -2, 3, 0, -3, 19):
            await store.insert("message", message(monoton))
        await store.insert("message", message(20, OTHER_BUCKET))
        rows = await store.read_partition("message", BUCKET)
        assert [row["monoton"] for row in rows] == [-3, -2, 0, 3, 7, 19]
        assert rows[0] == full_row("message", **message(-3))

    run(body)


def test_read_all_gives_every_partition(store: CassStore) -> None:
    async def body() -> None:
        names = [("b", "q2"), ("a", "q1"), ("b", "q1")]
        for account, queue in names:
            await store.insert("queue", {"account_name": account, "queuename": queue, "version": 1, "status": 1})
        rows = await store.read_all("queue")
        assert sorted((row["account_name"], row["queuename"]) for row in rows) == sorted(names)
        assert all(row["version"] == 1 and row["bucket_size"] is None for row in rows)
        assert await store.read_all("deletion_job") == []

    run(body)


def test_rows_returned_are_copies(store: CassStore) -> None:
    async def body() -> None:
        keys = {"k1": "secret"}
        await store.insert("account", {"account_name": "acct", "keys": keys})
        keys["k2"] = "added after the insert"
        row = await store.read("account", {"account_name": "acct"})
        assert row["keys"] == {"k1": "secret"}
        row["keys"]["k3"] = "changed by a caller"
        row["account_name"] = "renamed"
        assert await store.read("account", {"account_name": "acct"}) == {"account_name": "acct",
                                                                         "keys": {"k1": "secret"}}

    run(body)


# -- lightweight transactions --------------------------------------------------------------------


def test_insert_if_not_exists_applies_once_and_leaves_the_row(store: CassStore) -> None:
    async def body() -> None:
        assert await store.insert("message", message(-2, acked=True), if_not_exists=True) is True
        assert await store.insert("message", message(-2, message="other", acked=False), if_not_exists=True) is False
        assert await store.read("message", message_key(-2)) == full_row("message", **message(-2, acked=True))

    run(body)


def test_update_if_equal(store: CassStore) -> None:
    async def body() -> None:
        key = {"queueid": "q"}
        await store.insert("monoton", {**key, "value": 4})
        assert await store.update("monoton", key, {"value": 5}, conditions=[Condition("value", "=", 3)]) is False
        assert (await store.read("monoton", key))["value"] == 4
        assert await store.update("monoton", key, {"value": 5}, conditions=[Condition("value", "=", 4)]) is True
        assert (await store.read("monoton", key))["value"] == 5

    run(body)


def test_update_if_greater_and_greater_or_equal(store: CassStore) -> None:
    async def body() -> None:
        key = {"queueid": "q", "pointer_type": "INVISIBILITY_POINTER"}
        await store.insert("pointer", {**key, "value": 10})
        assert await store.update("pointer", key, {"value": 7}, conditions=[Condition("value", ">", 10)]) is False
        assert await store.update("pointer", key, {"value": 7}, conditions=[Condition("value", ">", 9)]) is True
        assert (await store.read("pointer", key))["value"] == 7
        assert await store.update("pointer", key, {"value": 3}, conditions=[Condition("value", ">=", 8)]) is False
        assert await store.update("pointer", key, {"value": 3}, conditions=[Condition("value", ">=", 7)]) is True
        assert (await store.read("pointer", key))["value"] == 3

    run(body)


def test_update_with_two_conditions_needs_both(store: CassStore) -> None:
    async def body() -> None:
        await store.insert("message", message(4, version=2))
        consume = [Condition("version", "=", 2), Condition("acked", "=", False)]
        assert await store.update("message", message_key(4), {"acked": True},
                                  conditions=[Condition("version", "=", 1), Condition("acked", "=", False)]) is False
        assert await store.update("message", message_key(4), {"acked": True}, conditions=consume) is True
        assert await store.update("message", message_key(4), {"acked": True}, conditions=consume) is False
        row = await store.read("message", message_key(4))
        assert row["acked"] is True and row["version"] == 2

    run(body)


def test_conditions_on_a_text_column_and_a_null(store: CassStore) -> None:
    async def body() -> None:
        await store.insert("message", message(4, tag=None))
        # Cassandra's IF tag = null holds on a row whose tag is null
        assert await store.update("message", message_key(4), {"tag": "a"}, conditions=[Condition("tag", "=", None)])
        assert not await store.update("message", message_key(4), {"tag": "b"}, conditions=[Condition("tag", "=", None)])
        assert not await store.update("message", message_key(4), {"tag": "b"}, conditions=[Condition("tag", "=", "z")])
        assert await store.update("message", message_key(4), {"tag": "b"}, conditions=[Condition("tag", "=", "a")])
        assert (await store.read("message", message_key(4)))["tag"] == "b"
        # a null never compares greater
        assert not await store.update("message", message_key(4), {"delivery_count": 1},
                                      conditions=[Condition("updated_date", ">", 0)])

    run(body)


def test_a_conditional_update_never_applies_to_a_missing_row(store: CassStore) -> None:
    async def body() -> None:
        key = {"queueid": "q", "pointer_type": "BUCKET_POINTER"}
        for condition in (Condition("value", "=", None), Condition("value", ">=", 0), Condition("queueid", "=", "q")):
            assert await store.update("pointer", key, {"value": 1}, conditions=[condition]) is False
        assert await store.read("pointer", key) is None

    run(body)


def test_update_without_conditions_upserts(store: CassStore) -> None:
    async def body() -> None:
        key = {"queueid": "q", "pointer_type": "REPAIR_BUCKET"}
        assert await store.update("pointer", key, {"value": 2}) is True
        assert await store.read("pointer", key) == {**key, "value": 2}
        assert await store.update("pointer", key, {"value": 3}) is True
        assert await store.read("pointer", key) == {**key, "value": 3}

    run(body)


def test_delete_with_and_without_condition(store: CassStore) -> None:
    async def body() -> None:
        key = {"account_name": "a", "queuename": "q"}
        await store.insert("queue", {**key, "status": 3})
        assert await store.delete("queue", key, conditions=[Condition("status", "=", 4)]) is False
        assert await store.read("queue", key) is not None
        await store.update("queue", key, {"status": 4})
        assert await store.delete("queue", key, conditions=[Condition("status", "=", 4)]) is True
        assert await store.read("queue", key) is None
        assert await store.delete("queue", key, conditions=[Condition("status", "=", 4)]) is False

        await store.insert("message", message(1))
        assert await store.delete("message", message_key(1)) is True
        assert await store.read("message", message_key(1)) is None
        assert await store.delete("message", message_key(1)) is True  # as CQL: a plain delete always applies

    run(body)


def test_delete_partition_removes_only_that_partition(store: CassStore) -> None:
    async def body() -> None:
        for monoton in (0, 1, -2, -3):
            await store.insert("message", message(monoton))
        await store.insert("message", message(20, OTHER_BUCKET))
        await store.delete_partition("message", BUCKET)
        assert await store.read_partition("message", BUCKET) == []
        assert [row["monoton"] for row in await store.read_partition("message", OTHER_BUCKET)] == [20]
        await store.delete_partition("message", BUCKET)  # deleting nothing is fine

    run(body)


# -- counters, maps, booleans ------------------------------------------------------------------


def test_counters_add_and_subtract_and_a_missing_counter_is_no_row(store: CassStore) -> None:
    async def body() -> None:
        key = {"queue_stats_id": "uuid_acct:q_v0"}
        # never added: no row (None), as Cassandra; the core reads it as 0
        assert await store.read("queue_stats", key) is None
        await store.add("queue_stats", key, "size", 1)
        await store.add("queue_stats", key, "size", 1)
        await store.add("queue_stats", key, "size", -1)
        assert await store.read("queue_stats", key) == {**key, "size": 1}
        await store.add("queue_stats", key, "size", -3)
        assert (await store.read("queue_stats", key))["size"] == -2
        assert await store.read("queue_stats", {"queue_stats_id": "other"}) is None

    run(body)


def test_map_columns_round_trip(store: CassStore) -> None:
    async def body() -> None:
        keys = {"primary": "a2V5MQ==", "secondary": "ключ-2", "quote": 'a"b'}
        await store.insert("account", {"account_name": "acct", "keys": keys}, if_not_exists=True)
        assert (await store.read("account", {"account_name": "acct"}))["keys"] == keys
        await store.update("account", {"account_name": "acct"}, {"keys": {}})
        assert (await store.read("account", {"account_name": "acct"}))["keys"] == {}
        await store.insert("account", {"account_name": "none"})
        assert (await store.read("account", {"account_name": "none"}))["keys"] is None

    run(body)


def test_booleans_round_trip_as_bool(store: CassStore) -> None:
    async def body() -> None:
        key = {"account_name": "a", "queuename": "q"}
        await store.insert("queue", {**key, "strict_fifo": True, "delete_buckets_after_finalization": False})
        row = await store.read("queue", key)
        assert type(row["strict_fifo"]) is bool and row["strict_fifo"] is True
        assert type(row["delete_buckets_after_finalization"]) is bool
        assert row["delete_buckets_after_finalization"] is False
        assert row["dlq_queue_name"] is None
        (listed,) = await store.read_all("queue")
        assert listed["strict_fifo"] is True

    run(body)


def test_statements_every_store_refuses(store: CassStore) -> None:
    async def body() -> None:
        with pytest.raises(ValueError, match="no table"):
            await store.read("messages", message_key(1))
        with pytest.raises(ValueError, match="monoton"):
            await store.read("message", BUCKET)  # a partial key
        with pytest.raises(ValueError, match="no column"):
            await store.insert("message", {**message_key(1), "colour": "red"})
        with pytest.raises(ValueError, match="key column"):
            await store.update("message", message_key(1), {"monoton": 2})
        with pytest.raises(ValueError, match="counter"):
            await store.update("queue_stats", {"queue_stats_id": "s"}, {"size": 3})
        with pytest.raises(ValueError, match="not a counter"):
            await store.add("pointer", {"queueid": "q", "pointer_type": "p"}, "value", 1)
        with pytest.raises(ValueError, match="operator"):
            await store.update("monoton", {"queueid": "q"}, {"value": 1}, conditions=[Condition("value", "<", 1)])
        with pytest.raises(ValueError, match="None"):
            await store.insert("monoton", {"queueid": None, "value": 1})
        with pytest.raises(ValueError, match="needs a column"):
            await store.update("monoton", {"queueid": "q"}, {})
        assert await store.read_all("message") == []

    run(body)


# -- sharing: two processes on one store ------------------------------------------------------


def test_two_stores_on_one_database_see_each_others_writes(shared_url: str) -> None:
    async def body() -> None:
        first, second = open_store(shared_url), open_store(shared_url)
        try:
            await first.insert("monoton", {"queueid": "q", "value": 0}, if_not_exists=True)
            assert await second.insert("monoton", {"queueid": "q", "value": 9}, if_not_exists=True) is False
            assert await second.read("monoton", {"queueid": "q"}) == {"queueid": "q", "value": 0}
            assert await second.update("monoton", {"queueid": "q"}, {"value": 1}, conditions=[Condition("value", "=", 0)])
            assert await first.read("monoton", {"queueid": "q"}) == {"queueid": "q", "value": 1}
            await second.delete_partition("monoton", {"queueid": "q"})
            assert await first.read_all("monoton") == []
        finally:
            first.close()
            second.close()

    run(body)


CONTENDERS = 8
ROUNDS = 15


async def _claim_monotons(store: CassStore, count: int) -> list[int]:
    """The monoton increment (spec §4.1, CAS-1): read c, then ``IF value = c`` set c+1,
    retried until it applies; gives the ids this worker got."""
    claimed = []
    while len(claimed) < count:
        current = (await store.read("monoton", {"queueid": "q"}))["value"]
        if await store.update("monoton", {"queueid": "q"}, {"value": current + 1},
                              conditions=[Condition("value", "=", current)]):
            claimed.append(current)
    return claimed


_start: Any = None  # a worker process's start barrier


def _wait_with_the_others(start: Any) -> None:
    global _start
    _start = start


def _claim_in_a_process(url: str, count: int) -> list[int]:
    store = open_store(url)
    try:
        _start.wait()  # all connected: now they race
        return asyncio.run(_claim_monotons(store, count))
    finally:
        store.close()


def _race_sqlite(url: str, expected: int) -> list[bool]:
    """CONTENDERS threads, each with its own connection, try ``IF value = expected`` at once."""
    start = threading.Barrier(CONTENDERS)
    outcomes: list[bool | None] = [None] * CONTENDERS

    def contend(index: int) -> None:
        store = open_store(url)  # a connection belongs to its thread
        try:
            start.wait()
            outcomes[index] = asyncio.run(store.update(
                "monoton", {"queueid": "q"}, {"value": expected + 1 + index},
                conditions=[Condition("value", "=", expected)]))
        finally:
            store.close()

    threads = [threading.Thread(target=contend, args=(index,)) for index in range(CONTENDERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert None not in outcomes, "a contender raised"
    return outcomes


async def _race_postgres(url: str, expected: int) -> list[bool]:
    """CONTENDERS connections send ``IF value = expected`` at once."""
    stores = [open_store(url) for _ in range(CONTENDERS)]
    try:
        for store in stores:  # connect first, so the updates race and not the connections
            await store.read("monoton", {"queueid": "q"})
        return list(await asyncio.gather(*(
            store.update("monoton", {"queueid": "q"}, {"value": expected + 1 + index},
                         conditions=[Condition("value", "=", expected)])
            for index, store in enumerate(stores))))
    finally:
        for store in stores:
            store.close()


def test_exactly_one_of_competing_compare_and_sets_applies(shared_url: str) -> None:
    setup = open_store(shared_url)
    try:
        asyncio.run(setup.insert("monoton", {"queueid": "q", "value": 0}))
    finally:
        setup.close()
    for _ in range(ROUNDS):
        reader = open_store(shared_url)
        expected = asyncio.run(reader.read("monoton", {"queueid": "q"}))["value"]
        reader.close()
        if shared_url.startswith("sqlite"):
            outcomes = _race_sqlite(shared_url, expected)
        else:
            outcomes = asyncio.run(_race_postgres(shared_url, expected))
        assert outcomes.count(True) == 1, outcomes
        winner = outcomes.index(True)
        reader = open_store(shared_url)
        assert asyncio.run(reader.read("monoton", {"queueid": "q"}))["value"] == expected + 1 + winner
        reader.close()


def test_processes_claiming_monotons_never_share_one(shared_url: str) -> None:
    """Separate processes run the monoton increment on one store: every id is handed out
    exactly once (what several API processes on one SQLite file rely on)."""
    workers, each = 3, 100
    setup = open_store(shared_url)
    asyncio.run(setup.insert("monoton", {"queueid": "q", "value": 0}))
    setup.close()
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=spawn, initializer=_wait_with_the_others,
                             initargs=(spawn.Barrier(workers),)) as pool:
        claimed = list(pool.map(_claim_in_a_process, [shared_url] * workers, [each] * workers))
    every = sorted(monoton for worker in claimed for monoton in worker)
    assert every == list(range(workers * each))
    final = open_store(shared_url)
    assert asyncio.run(final.read("monoton", {"queueid": "q"}))["value"] == workers * each
    final.close()


# -- URLs --------------------------------------------------------------------------------------


def test_open_store_by_url(tmp_path, pg_url: str) -> None:  # noqa: F811 (fixture)
    assert isinstance(open_store("memory:"), MemoryStore)
    for url in (f"sqlite:///{tmp_path / 'a.db'}", str(tmp_path / "b.db")):
        store = open_store(url)
        assert isinstance(store, SQLiteStore)
        store.close()
    assert (tmp_path / "a.db").exists() and (tmp_path / "b.db").exists()
    postgres = open_store(pg_url)
    assert isinstance(postgres, PostgresStore)
    assert asyncio.run(postgres.read_all("account")) == []
    postgres.close()


@pytest.mark.parametrize("url", ["", "mysql://host/db", "sqlite://host/file.db", "memory:x", "sqlite:"])
def test_a_bad_store_url_names_what_is_accepted(url: str) -> None:
    with pytest.raises(ValueError) as error:
        open_store(url)
    assert ACCEPTED in str(error.value)


# -- failures --------------------------------------------------------------------------------


def test_an_unreachable_store_is_a_store_error(tmp_path) -> None:
    with pytest.raises(StoreError, match="cannot open"):
        open_store(str(tmp_path / "no such folder" / "cassieq.db"))
    nobody = open_store("postgresql://postgres@127.0.0.1:1/cassieq", timeout_s=1)
    with pytest.raises(StoreError):
        asyncio.run(nobody.read_all("queue"))
    nobody.close()


def test_postgres_reconnects_after_the_server_drops_the_connection(pg_server: str, pg_url: str) -> None:  # noqa: F811 (fixture)
    async def body() -> None:
        store = open_store(pg_url)
        try:
            await store.insert("monoton", {"queueid": "q", "value": 1})
            with psycopg.connect(pg_server, autocommit=True) as admin:
                dropped = admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                        "WHERE datname = %s AND pid <> pg_backend_pid()",
                                        [urlsplit(pg_url).path.lstrip("/")]).fetchall()
            assert dropped == [(True,)]
            with pytest.raises(StoreError):  # the statement in flight: its outcome is unknown
                await store.read("monoton", {"queueid": "q"})
            assert await store.read("monoton", {"queueid": "q"}) == {"queueid": "q", "value": 1}
        finally:
            store.close()

    run(body)
