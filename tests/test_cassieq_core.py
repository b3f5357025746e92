"""CassieQ's core algorithms in the simulated world: the original's ReaderTester, RepairTests,
MessageRepositoryTester, QueueRepositoryTester, QueueDeleterTests and PopReceiptTester, the
★ tests of spec §6 that need no HTTP, and what the spec adds (the starvation scenario,
dead letters, delivery counts, expired leases, malformed receipts, the store retry).

The core runs on a sim node's Runtime over an in-process MemoryStore; ``await h.tick(s)``
advances simulated time as the original's TestClock did. Where tasks must interleave, a
``SlowStore`` puts a short random wait before every statement (a MemoryStore alone never
yields, so concurrent tasks would run one after the other).
"""

from __future__ import annotations

import base64
import random
import re
from typing import Any, Awaitable, Callable

import pytest

from lab.backends.cassieq.core.errors import (BadPopReceipt, Conflict, InvalidName, InvalidOptions, NotFound,
                                              QueueAlreadyDeleting)
from lab.backends.cassieq.core.memory_store import MemoryStore
from lab.backends.cassieq.core.messages import MessageQueue
from lab.backends.cassieq.core.model import (FINALIZER, TOMBSTONE, DeletionJob, Delivery, PopReceipt,
                                             QueueCreateOptions, QueueDefinition, QueueStatus, new_tag)
from lab.backends.cassieq.core.queues import Queues
from lab.backends.cassieq.core.repair import RepairWorker
from lab.backends.cassieq.core.retry import RetryingStore
from lab.backends.cassieq.core.store import StoreError
from models.world import SimWorld
from tests.test_core_purity import ROOT, forbidden_chains

ACCOUNT = "test"
CORE = ROOT / "lab" / "backends" / "cassieq" / "core"


# -- the harness -------------------------------------------------------------------------------

class SlowStore:
    """A store whose every statement first waits a random 0.5-3 ms of simulated time, so
    concurrent tasks interleave between a read and the compare-and-set that follows it."""

    def __init__(self, inner: MemoryStore, rt: Any, seed: int):
        self.inner, self.rt, self.rng = inner, rt, random.Random(seed)

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)
        if name == "close":
            return method

        async def slow(*args: Any, **kwargs: Any) -> Any:
            await self.rt.sleep(self.rng.uniform(0.0005, 0.003))
            return await method(*args, **kwargs)

        return slow


class QueueContext:
    """One queue of the test account, as the original's TestQueueContext."""

    def __init__(self, h: "Harness", definition: QueueDefinition):
        self.h = h
        self.definition = definition
        self.mq = MessageQueue(h.store, h.rt, definition, h.queues)
        self.data = self.mq.data

    async def put(self, body: str, delay: float = 0) -> int:
        return await self.mq.put(body, delay)

    async def ghost(self) -> int:
        """An id handed out whose message is never written (a put that died after CAS-1)."""
        return await self.data.next_monotonic()

    async def read(self, invisibility: float = 10) -> Delivery | None:
        return await self.mq.get(invisibility)

    async def read_and_ack(self, body: str, invisibility: float = 10) -> Delivery:
        delivery = await self.read(invisibility)
        assert delivery is not None, f"expected {body!r}, got nothing"
        assert delivery.body == body
        await self.mq.ack(delivery.pop_receipt)
        return delivery

    async def row(self, index: int):
        return await self.data.message(index)

    async def size(self) -> int:
        return await self.data.size()


class Harness:
    def __init__(self, world: SimWorld, store: Any, rt: Any):
        self.world, self.store, self.rt = world, store, rt
        self.queues = Queues(store, rt, ACCOUNT)

    async def tick(self, seconds: float = 1) -> None:
        await self.rt.sleep(seconds)

    async def queue(self, name: str, **options: Any) -> QueueContext:
        outcome = await self.queues.create(QueueCreateOptions(name, **options))
        assert outcome.created and outcome.definition is not None
        return QueueContext(self, outcome.definition)

    def repair(self, ctx: QueueContext) -> RepairWorker:
        return RepairWorker(self.store, self.rt, ctx.definition)


def sim(body: Callable[[Harness], Awaitable[Any]], seed: int = 1, slow: bool = False) -> Any:
    world = SimWorld(seed)

    async def main(control: Any) -> Any:
        rt = world.node("cassieq")
        store: Any = MemoryStore()
        if slow:
            store = SlowStore(store, rt, seed)
        return await body(Harness(world, store, rt))

    return world.run(main)


# -- purity -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("module", ["model", "errors", "retry", "queue_data", "queues", "messages", "repair"])
def test_core_module_reaches_no_clock_randomness_or_world(module):
    assert forbidden_chains(CORE / f"{module}.py") == []


# -- model: names, options, definitions, receipts ---------------------------------------------------

def test_queue_names_are_trimmed_and_checked():
    assert QueueCreateOptions("  a.b-c_9 ").queue_name == "a.b-c_9"  # create_queue_with_dots_works
    for bad in ("invalid!", "", "   ", "a b", "a/b"):
        with pytest.raises(InvalidName):
            QueueCreateOptions(bad)


def test_create_options_defaults_json_and_validation():
    options = QueueCreateOptions.from_json({"queueName": "q", "unknown": 1, "bucketSize": None})
    assert (options.bucket_size, options.max_delivery_count, options.repair_worker_poll_seconds,
            options.repair_worker_finalize_seconds, options.delete_buckets_after_finalize,
            options.dlq_name, options.strict_fifo) == (20, 5, 5, 15, True, None, True)
    assert QueueCreateOptions.from_json({"queueName": "q", "dlqName": "d"}).dlq_name == "d"
    assert QueueCreateOptions.from_json({"queueName": "q", "dlqName": "d"}, accept_dlq=False).dlq_name is None
    for body in ({}, {"queueName": "q", "bucketSize": 0}, {"queueName": "q", "bucketSize": "3"},
                 {"queueName": "q", "maxDeliveryCount": 0}, {"queueName": "q", "repairWorkerPollSeconds": 0},
                 {"queueName": "q", "deleteBucketsAfterFinalize": "yes"}, ["q"]):
        with pytest.raises(InvalidOptions):
            QueueCreateOptions.from_json(body)


def test_queue_definition_json_has_every_field_and_the_derived_id():
    definition = QueueCreateOptions("q", bucket_size=3).definition("acct", version=2, status=QueueStatus.Active,
                                                                    queue_stats_id="s")
    assert definition.id == "acct:q_v2"
    assert definition.to_json() == {
        "accountName": "acct", "queueName": "q", "bucketSize": 3, "maxDeliveryCount": 5, "status": "Active",
        "version": 2, "repairWorkerPollFrequencySeconds": 5, "repairWorkerTombstonedBucketTimeoutSeconds": 15,
        "deleteBucketsAfterFinalization": True, "queueStatsId": "s", "dlqName": None, "strictFifo": True,
        "id": "acct:q_v2"}
    assert QueueDefinition.from_row(definition.to_row()) == definition
    assert [s.value for s in QueueStatus] == [0, 1, 2, 3, 4]
    assert [s.name for s in QueueStatus] == ["Provisioning", "Active", "PendingDelete", "Deleting", "Inactive"]


def test_pop_receipt_round_trip_is_standard_base64_without_padding():
    receipt = PopReceipt(42, 3, "ab+/cd")
    encoded = receipt.encode()
    assert "=" not in encoded
    assert base64.b64decode(encoded + "=" * (-len(encoded) % 4)).decode() == "42:3:ab+/cd"
    assert PopReceipt.decode(encoded) == receipt


@pytest.mark.parametrize("bad", [
    "", "!!!!", "bm9jb2xvbnM",  # "nocolons"
    base64.b64encode(b"1:2").decode(), base64.b64encode(b"x:2:tag").decode(),
    base64.b64encode(b"1:2:").decode(), base64.b64encode(b"1:2:t:u").decode(),
    "MToy OmErYg",  # a '+' sent unencoded arrives as a space
    None, 12,
])
def test_a_malformed_receipt_is_a_bad_pop_receipt(bad):
    with pytest.raises(BadPopReceipt):
        PopReceipt.decode(bad)
    assert issubclass(BadPopReceipt, ValueError)


def test_a_receipt_never_holds_plus_or_slash():
    """The spec warns that a receipt "can contain + and /"; it cannot: Base64 of ASCII text
    (digits, ':' and a tag's characters) never yields the 6-bit groups 62 and 63."""
    rng = random.Random(2)
    receipts = [PopReceipt(rng.randrange(10 ** 9), rng.randrange(1, 100), new_tag(rng)).encode() for _ in range(5000)]
    assert not any("+" in r or "/" in r for r in receipts)


def test_message_tags_are_four_random_bytes_in_base64():
    rng = random.Random(3)
    tags = {new_tag(rng) for _ in range(200)}
    assert len(tags) == 200
    assert all(re.fullmatch(r"[A-Za-z0-9+/]{6}", tag) and len(base64.b64decode(tag + "==")) == 4 for tag in tags)


# -- ReaderTester ----------------------------------------------------------------------------------

def test_initial_invis_is_respected():  # ★
    async def body(h: Harness):
        q = await h.queue("initial_inivs_is_respected", bucket_size=10)
        await q.put("msg1", 0)
        await q.put("msg2", 400000)
        await q.put("msg3", 300000)
        await q.put("msg4", 200000)
        await q.put("msg5", 0)
        await q.read_and_ack("msg1")
        await q.read_and_ack("msg5")
        assert await q.read() is None
        await h.tick(200000)
        await q.read_and_ack("msg4")
        await h.tick(100000)
        await q.read_and_ack("msg3")
        await h.tick(100000)
        await q.read_and_ack("msg2")
        assert await q.read() is None

    sim(body)


def test_invis_stops_non_finalized_bucket():
    async def body(h: Harness):
        q = await h.queue("invis_stops_non_finalized_bucket", bucket_size=3)
        await q.put("1", 0)
        await q.put("2", 3)
        await q.ghost()
        await q.put("4 (new bucket)", 0)
        await q.put("5", 30)
        await q.put("6", 20)
        await q.read_and_ack("1")
        await q.read_and_ack("4 (new bucket)")  # 2 is invisible, 3 a ghost
        assert await q.read(10) is None
        await h.tick(10)
        two = await q.read(1)  # 2 is alive now
        assert two is not None and two.body == "2"
        assert await q.read(0) is None  # 2 is leased again, 5 and 6 still hidden
        await h.tick(2)
        await q.read_and_ack("2")  # its lease expired: back through the invisibility pointer
        assert await q.data.invis_pointer() == 1
        await q.data.finalize(0)  # as the repair worker would: nothing more will land in bucket 0
        assert await q.read(10) is None  # 5 is still invisible
        pointed = await q.row(await q.data.invis_pointer())
        assert pointed is not None and pointed.body == "5"

    sim(body)


def test_initial_invis_picked_up():
    async def body(h: Harness):
        q = await h.queue("initial_inivis_picked_up", bucket_size=3)
        for delay, text in ((10, "1"), (5, "2"), (12, "3"), (0, "4 (new bucket)"), (0, "5"), (1, "6")):
            await q.put(text, delay)
        await q.read_and_ack("4 (new bucket)")  # the reader skipped the delayed ones and sealed bucket 0
        await q.read_and_ack("5")
        assert await q.read(10) is None
        assert await q.data.tombstone_time(0) is not None and await q.data.reader_bucket() == 2
        await h.tick(10)
        await q.read_and_ack("1")
        await q.read_and_ack("2")  # alive since 5 s, but blocked by 1
        assert await q.read(10) is None  # 3 is blocked
        await h.tick(5)
        await q.read_and_ack("3")
        await q.read_and_ack("6")

    sim(body)


def test_delivery_count_increases_after_message_expires_and_is_redelivered():  # ★
    async def body(h: Harness):
        q = await h.queue("delivery_count_increases")
        await q.put("hi")
        await h.tick()
        first = await q.read(4)
        assert first is not None and first.delivery_count == 0
        await h.tick(5)
        second = await q.read(4)
        assert second is not None and second.delivery_count == 1 and second.tag == first.tag
        await h.tick(5)
        third = await q.read(4)
        assert third is not None and third.delivery_count == 2
        assert (await q.row(0)).delivery_count == 3  # the row counts every delivery; a get reports the earlier ones

    sim(body)


def test_reader_stops_on_deleted_queue():
    async def body(h: Harness):
        q = await h.queue("reader_stops_on_deleted_queue")
        await q.put("hi")
        await h.tick()
        assert await h.queues.mark_for_deletion(q.definition) is not None
        assert await q.read(10) is None
        assert (await q.row(0)).delivery_count == 0  # not leased either

    sim(body)


def test_a_negative_lease_is_refused():
    async def body(h: Harness):
        q = await h.queue("negative")
        await q.put("a")
        with pytest.raises(ValueError):
            await q.read(-1)
        assert (await q.row(0)).delivery_count == 0

    sim(body)


def test_ack_next_message():
    async def body(h: Harness):
        q = await h.queue("test_ack_next_message")
        await q.put("hi")
        await h.tick()
        await q.read_and_ack("hi", 100)
        await h.tick()
        assert await q.read(1) is None

    sim(body)


def test_acked_message_should_never_be_visible():  # ★
    async def body(h: Harness):
        q = await h.queue("test_ack_next_message_should_never_be_visible")
        await q.put("ghost")
        await h.tick()
        await q.read_and_ack("ghost", 1)
        for _ in range(10):
            await h.tick()
            assert await q.read(0.3) is None

    sim(body)


def test_invis_pointer_scan_finds_newly_alive_messages():  # ★ the starvation of spec §5
    async def body(h: Harness):
        q = await h.queue("invis_pointer_scan_finds_newly_alive_messages", bucket_size=3)
        for text in ("ok", "invis blocker", "invis shorter", "ok2", "ok3", "ok4"):
            await q.put(text)
        await q.read_and_ack("ok", 1)
        await h.tick(1)
        blocker = await q.read(5)
        shorter = await q.read(1)
        assert (blocker.body, shorter.body) == ("invis blocker", "invis shorter")
        await q.read_and_ack("ok2", 10)  # the reader moves on to bucket 1 here
        assert await q.data.reader_bucket() == 1
        await h.tick(2)
        # "invis shorter" is alive again, but the pointer stops at the blocker's lease
        shorter_row = await q.row(shorter.index)
        assert not shorter_row.acked and shorter_row.visible(q.data.now_ms())
        assert await q.data.invis_pointer() == blocker.index
        await q.read_and_ack("ok3", 0)
        await h.tick(10)  # the blocker is alive
        await q.read_and_ack("invis blocker", 0)
        await q.read_and_ack("invis shorter", 0)
        await q.read_and_ack("ok4", 0)
        assert await q.read() is None

    sim(body)


def test_update_message_should_extend_invisibility_time_and_be_ackable():
    async def body(h: Harness):
        q = await h.queue("update_extends", bucket_size=3)
        await q.put("init")
        delivery = await q.read(10)
        updated = await q.mq.update(delivery.pop_receipt, "init2", 20)
        assert updated.message_tag == delivery.tag and updated.pop_receipt != delivery.pop_receipt
        assert await q.read(10) is None
        await h.tick(12)  # the first lease would have expired here
        assert await q.read(10) is None
        await q.mq.ack(updated.pop_receipt)
        assert await q.read(10) is None

    sim(body)


def test_update_message_to_zero_time_should_nack_with_defer():
    async def body(h: Harness):
        q = await h.queue("update_nacks", bucket_size=3)
        await q.put("init")
        delivery = await q.read(10)
        await q.mq.update(delivery.pop_receipt, "init2", 0)
        with pytest.raises(Conflict) as refused:
            await q.mq.ack(delivery.pop_receipt)
        assert (refused.value.operation, refused.value.message) == (
            "AckMessage", "The message is already being reprocessed.")
        again = await q.read(10)
        assert again is not None and again.body == "init2"

    sim(body)


def test_update_message_should_extend_invisibility_time_and_still_expire():
    async def body(h: Harness):
        q = await h.queue("update_expires", bucket_size=3)
        await q.put("init")
        delivery = await q.read(10)
        await q.mq.update(delivery.pop_receipt, "init2", 20)
        assert await q.read(10) is None
        await h.tick(12)
        assert await q.read(10) is None
        await h.tick(10)
        expired = await q.read(10)
        assert expired is not None
        assert expired.tag == delivery.tag and expired.version > delivery.version and expired.body == "init2"

    sim(body)


def test_nack_via_update():  # ★
    async def body(h: Harness):
        q = await h.queue("test_nack_via_update", bucket_size=3)
        await q.put("init")
        original = await q.read(10)
        await q.mq.update(original.pop_receipt, "init2", 0)
        nacked = await q.read(10)
        assert nacked is not None
        assert nacked.tag == original.tag and nacked.version > original.version and nacked.body == "init2"
        assert nacked.delivery_count == original.delivery_count + 1
        with pytest.raises(Conflict):
            await q.mq.ack(original.pop_receipt)

    sim(body)


def test_monoton_skipped():
    async def body(h: Harness):
        q = await h.queue("test_monoton_skipped", bucket_size=5)
        for _ in range(4):
            await q.put("foo")
            await h.tick()
            await q.read_and_ack("foo", 100)
        await q.ghost()  # the last id of bucket 0 is handed out and never written
        await q.put("bar")
        await h.tick()
        await q.read_and_ack("bar", 100)
        assert await q.data.reader_bucket() == 1

    sim(body)


def test_the_reader_does_not_seal_an_open_bucket():
    async def body(h: Harness):
        q = await h.queue("open_bucket", bucket_size=3)
        await q.put("a")
        await q.read_and_ack("a")
        assert await q.read() is None
        assert await q.data.tombstone_time(0) is None and await q.data.reader_bucket() == 0
        await q.put("b")  # still bucket 0: the reader must still be there
        await q.read_and_ack("b")

    sim(body)


def test_without_strict_fifo_the_reader_picks_at_random_within_a_bucket():
    async def body(h: Harness):
        q = await h.queue("random_pick", bucket_size=20, strict_fifo=False)
        for i in range(10):
            await q.put(str(i))
        seen = []
        while (delivery := await q.read()) is not None:
            seen.append(int(delivery.body))
            await q.mq.ack(delivery.pop_receipt)
        return seen

    seen = sim(body, seed=5)
    assert sorted(seen) == list(range(10)) and seen != list(range(10))


# -- ack, update and receipts ----------------------------------------------------------------------

def test_an_expired_lease_acks_with_the_old_receipt_if_nobody_leased_it_again():
    async def body(h: Harness):
        q = await h.queue("expired_ack")
        await q.put("a")
        await q.put("b")
        a = await q.read(1)
        await h.tick(5)  # expired, but nobody read again
        await q.mq.ack(a.pop_receipt)
        assert (await q.row(a.index)).acked and await q.size() == 1

        b = await q.read(1)
        await h.tick(5)
        again = await q.read(10)  # re-leased: the version moved on
        assert again.index == b.index and again.delivery_count == 1
        with pytest.raises(Conflict):
            await q.mq.ack(b.pop_receipt)
        with pytest.raises(Conflict) as stale:
            await q.mq.update(b.pop_receipt, "x", 10)
        assert (stale.value.operation, stale.value.message) == ("UpdateMessage", "Pop receipt is stale.")
        await q.mq.ack(again.pop_receipt)
        assert await q.size() == 0

    sim(body)


def test_receipts_that_name_no_row_or_do_not_decode_are_refused_without_touching_the_store():
    async def body(h: Harness):
        q = await h.queue("bad_receipts", bucket_size=2)
        await q.put("a")
        delivery = await q.read(10)
        before = await h.store.read_all("message")
        for receipt in ("!!!", "MDoy OmErYg"):
            with pytest.raises(BadPopReceipt):
                await q.mq.ack(receipt)
            with pytest.raises(BadPopReceipt):
                await q.mq.update(receipt, "x", 0)
        for missing in (PopReceipt(7, 2, delivery.tag), PopReceipt(TOMBSTONE, 0, "x"), PopReceipt(-1, 1, "x")):
            with pytest.raises(Conflict):
                await q.mq.ack(missing.encode())  # the original: a NullPointerException, 500
            with pytest.raises(Conflict):
                await q.mq.update(missing.encode(), "x", 0)
        wrong_tag = PopReceipt(delivery.index, delivery.version, "zzzzzz").encode()
        with pytest.raises(Conflict):
            await q.mq.ack(wrong_tag)
        with pytest.raises(Conflict):
            await q.mq.update(wrong_tag, "x", 0)
        assert await h.store.read_all("message") == before
        await q.mq.ack(delivery.pop_receipt)

    sim(body)


def test_update_keeps_the_body_when_none_and_leaves_the_delivery_count():
    async def body(h: Harness):
        q = await h.queue("update_keeps")
        await q.put("body")
        delivery = await q.read(10)
        updated = await q.mq.update(delivery.pop_receipt, None, 0)
        row = await q.row(delivery.index)
        assert (row.body, row.delivery_count, row.version) == ("body", 1, delivery.version + 1)
        assert row.updated_date == q.data.now_ms() and row.next_visible_on == q.data.now_ms()
        assert PopReceipt.decode(updated.pop_receipt) == PopReceipt(delivery.index, delivery.version + 1, delivery.tag)

    sim(body)


def test_the_invisibility_pointer_moves_back_always_and_forward_only_from_what_was_read():  # CAS-5
    async def body(h: Harness):
        q = await h.queue("cas5")
        data = q.data
        assert await data.move_invis_pointer(-1, 10) == 10
        assert await data.move_invis_pointer(5, 3) == 3  # backwards, though the caller's reading is stale
        assert await data.move_invis_pointer(5, 12) == 3  # forwards from a stale reading: refused
        assert await data.move_invis_pointer(3, 12) == 12
        assert await data.invis_pointer() == 12
        assert await data.advance_reader(1, 2) == 0 and await data.advance_reader(0, 1) == 1  # CAS-4
        assert await data.advance_repair(3, 4) == 0 and await data.advance_repair(0, 1) == 1  # CAS-9

    sim(body)


# -- MessageRepositoryTester -----------------------------------------------------------------------

def test_put_message_should_succeed():
    async def body(h: Harness):
        q = await h.queue("put_message_should_succeed")
        index = await q.put("hi", 30)
        rows = await q.data.bucket(0)
        assert [m.index for m in rows] == [index] == [0]
        row = rows[0]
        assert (row.body, row.version, row.delivery_count, row.acked) == ("hi", 1, 0, False)
        assert row.next_visible_on == row.created_date + 30000 and len(row.tag) == 6

    sim(body)


async def read_till_poisoned(h: Harness, q: QueueContext) -> None:
    for _ in range(q.definition.max_delivery_count):
        poison = await q.read(1)
        assert poison is not None and poison.body == "1"
        await h.tick(2)  # the worker takes too long: the lease expires


def test_dead_letter_messages_should_not_reappear():
    async def body(h: Harness):
        q = await h.queue("dead_letter_messages_should_not_reappear", max_delivery_count=3)
        await q.put("1")
        await read_till_poisoned(h, q)
        assert await q.read(1) is None
        assert (await q.row(0)).acked and await q.size() == 0  # dropped: there is no DLQ
        for _ in range(5):
            await h.tick(2)
            assert await q.read(1) is None

    sim(body)


def test_dead_letter_messages_should_be_republished_to_dlq():  # ★
    async def body(h: Harness):
        dlq = await h.queue("dead_letter_messages_should_be_republished_to_dlq_dlq")
        q = await h.queue("dead_letter_messages_should_be_republished_to_dlq", max_delivery_count=3,
                          dlq_name=dlq.definition.queue_name)
        await q.put("1")
        original_tag = (await q.row(0)).tag
        await read_till_poisoned(h, q)
        assert await q.read(1) is None
        assert await q.size() == 0 and await dlq.size() == 1
        copy = await dlq.read(1)
        assert copy is not None and copy.body == "1" and copy.delivery_count == 0 and copy.tag != original_tag

    sim(body)


def test_a_dead_letter_is_dropped_when_the_dlq_is_not_active():
    async def body(h: Harness):
        dlq = await h.queue("gone_dlq")
        q = await h.queue("source", max_delivery_count=3, dlq_name="gone_dlq")
        await h.queues.delete("gone_dlq")
        await q.put("1")
        await read_till_poisoned(h, q)
        assert await q.read(1) is None and (await q.row(0)).acked
        assert all(row["queueid"] != dlq.definition.id for row in await h.store.read_all("message"))

    sim(body)


def test_a_dead_letter_is_dropped_when_the_dlq_is_deleted_during_the_copy():
    async def body(h: Harness):
        dlq = await h.queue("racing_dlq")
        q = await h.queue("source", max_delivery_count=1, dlq_name="racing_dlq")
        await q.put("1")
        await q.read(1)
        await h.tick(2)
        # the DLQ's delete job has removed its monoton, its row is still Active for a moment
        await h.store.delete("monoton", {"queueid": dlq.definition.id})
        assert await q.read(1) is None  # no error: the poison message is dropped
        assert (await q.row(0)).acked and await q.size() == 0

    sim(body)


def test_ack_message_should_succeed():
    async def body(h: Harness):
        q = await h.queue("ack_message_should_succeed")
        await q.put("hi", 30)
        message = await q.row(0)
        assert not message.acked
        assert await q.data.ack(message)
        acked = await q.row(0)
        assert acked.acked and acked.version == message.version + 1

    sim(body)


def test_ack_message_after_version_changed_should_fail():  # ★
    async def body(h: Harness):
        q = await h.queue("ack_message_after_version_changed_should_fail")
        await q.put("hi", 0.03)
        message = await q.row(0)
        consumed = await q.data.consume(message, 30 * 86400)
        assert consumed is not None and consumed.version != message.version
        assert not await q.data.ack(message)
        assert not (await q.row(0)).acked and await q.size() == 1

    sim(body)


def test_an_added_tombstone_should_exist():
    async def body(h: Harness):
        q = await h.queue("an_added_tombstone_should_exist")
        await h.tick(3)
        assert await q.data.tombstone_time(0) is None
        assert await q.data.tombstone(0)
        assert await q.data.tombstone_time(0) == q.data.now_ms()
        assert not await q.data.tombstone(0)  # IF NOT EXISTS: the seal time never moves
        assert [m.index for m in await q.data.bucket_contents(0)] == [TOMBSTONE]
        assert await q.data.bucket(0) == []  # markers are not messages

    sim(body)


def test_deleting_a_queue_deletes_all_messages():
    async def body(h: Harness):
        q = await h.queue("deleting_a_queue_deletes_all_messages", bucket_size=2)
        for i in range(5):
            await q.put(str(i))
        assert len(await q.data.bucket(0)) == 2
        await h.queues.run_deletion_job(DeletionJob.of(q.definition))
        assert [await q.data.bucket_contents(b) for b in range(4)] == [[], [], [], []]

    sim(body)


def test_deleting_a_bucket_removes_its_messages():
    async def body(h: Harness):
        q = await h.queue("deleting_a_bucket_removes_its_messages", bucket_size=2)
        for i in range(3):
            await q.put(str(i))
        await q.data.delete_bucket(0)
        assert await q.data.bucket(0) == [] and [m.body for m in await q.data.bucket(1)] == ["2"]

    sim(body)


# -- QueueRepositoryTester and QueueDeleterTests ---------------------------------------------------

def test_queue_operations():
    async def body(h: Harness):
        q = await h.queue("queue_operations")
        assert await h.queues.get_any("queue_operations") is not None
        assert await h.queues.get_active("queue_operations") == q.definition
        assert "queue_operations" in await h.queues.names()
        assert await q.data.current_monoton() == 0
        assert (await q.data.reader_bucket(), await q.data.invis_pointer(), await q.data.repair_bucket()) == (0, -1, 0)

    sim(body)


def test_queue_size_grows_and_shrinks():  # ★
    async def body(h: Harness):
        q = await h.queue("queue_size_grows_and_shrinks")
        for i in range(10):
            await q.put(str(i))
        assert await h.queues.size(q.definition) == 10
        for i in range(10):
            await q.read_and_ack(str(i))
            assert await h.queues.size(q.definition) == 9 - i

    sim(body)


def test_cannot_create_same_queue_twice():
    async def body(h: Harness):
        q = await h.queue("cannot_create_same_queue_twice")
        again = await h.queues.create(QueueCreateOptions("cannot_create_same_queue_twice", bucket_size=7))
        assert not again.created and again.definition == q.definition  # the first options stand
        assert str(Conflict.queue_exists("cannot_create_same_queue_twice")) == (
            "A queue named 'cannot_create_same_queue_twice' already exists.")

    sim(body)


def test_queue_definition_once_in_status_cant_move_backwards():
    async def body(h: Harness):
        await h.queue("status")
        advance = h.queues.advance_status
        assert not await advance("status", QueueStatus.Inactive)  # no skipping
        assert await advance("status", QueueStatus.PendingDelete)
        assert await advance("status", QueueStatus.Deleting)
        assert await advance("status", QueueStatus.Deleting)  # repeating is allowed
        assert await advance("status", QueueStatus.Inactive)
        assert not await advance("status", QueueStatus.Active)  # no going back
        assert (await h.queues.get_any("status")).status is QueueStatus.Inactive
        assert not await advance("nosuch", QueueStatus.Active)  # never on a missing row

    sim(body)


def test_can_create_new_queue_while_old_queue_is_deleting():
    async def body(h: Harness):
        old = await h.queue("recreate", bucket_size=3, repair_worker_poll_seconds=9)
        await old.put("old")
        assert await h.queues.mark_for_deletion(old.definition) is not None
        outcome = await h.queues.create(QueueCreateOptions("recreate", bucket_size=4, repair_worker_poll_seconds=2))
        new = outcome.definition
        assert outcome.created and new.version == 1 and new.status is QueueStatus.Active
        assert (new.bucket_size, new.repair_worker_poll_seconds) == (4, 2)  # every option of the request
        assert new.queue_stats_id != old.definition.queue_stats_id
        q = QueueContext(h, new)
        await q.put("new")  # the new id has its monoton (the original left it without one)
        await q.read_and_ack("new")

    sim(body)


def test_can_create_queue_while_job_is_deleting():
    async def body(h: Harness):
        v0 = await h.queue("job_is_deleting")
        assert v0.definition.version == 0
        job = await h.queues.mark_for_deletion(v0.definition)  # the job has not run yet
        v1 = await h.queues.create(QueueCreateOptions("job_is_deleting"))
        assert v1.created and v1.definition.version == 1
        await h.queues.run_deletion_job(job)  # the late job must not retire v1
        active = await h.queues.get_active("job_is_deleting")
        assert active is not None and active.version == 1
        assert await h.store.read_all("deletion_job") == []

    sim(body)


def test_a_late_deletion_job_retires_only_its_own_life():
    async def body(h: Harness):
        v0 = await h.queue("late_job")
        job0 = await h.queues.mark_for_deletion(v0.definition)
        v1 = (await h.queues.create(QueueCreateOptions("late_job"))).definition
        job1 = await h.queues.mark_for_deletion(v1)  # v1 is being deleted too
        await h.queues.run_deletion_job(job0)
        row = await h.queues.get_any("late_job")
        assert (row.version, row.status) == (1, QueueStatus.Deleting)  # v1's own job has not finished
        await h.queues.run_deletion_job(job1)
        assert await h.queues.get_any("late_job") is None

    sim(body)


def test_delete_queue():
    async def body(h: Harness):
        await h.queue("delete_queue")
        await h.queues.delete("delete_queue")
        assert await h.queues.get_active("delete_queue") is None
        assert await h.queues.get_any("delete_queue") is None  # the row is removed
        assert "delete_queue" not in await h.queues.names()

    sim(body)


def test_delete_on_non_existent_or_deleted_queue_is_not_found():  # ★ delete_on_non_existent_queue_fails
    async def body(h: Harness):
        with pytest.raises(NotFound) as missing:
            await h.queues.delete("nosuch")
        assert missing.value.to_json() == {"reason": "NotFound", "operation": "Delete", "queueName": "nosuch",
                                           "message": "The requested queue 'nosuch' was not found."}
        q = await h.queue("once")
        await h.queues.delete("once")
        with pytest.raises(NotFound):
            await h.queues.delete("once")
        with pytest.raises(NotFound):  # ★ put_into_deleted_queue_fails: the lookup a put does first
            await h.queues.require_active("once", "putMessage")
        with pytest.raises(NotFound):  # and a put that raced the delete finds no monoton
            await q.put("late")

    sim(body)


def test_deleter_cleans_up_pointers():
    async def body(h: Harness):
        q = await h.queue("test_deleter_cleans_up_pointers")
        await q.put("test")
        await q.ghost()
        assert await q.data.move_invis_pointer(0, 10) == -1  # moved by nobody: the stored value
        assert await q.data.move_invis_pointer(-1, 10) == 10
        assert await q.data.advance_reader(0, 10) == 10
        assert await q.size() == 1
        await h.queues.delete("test_deleter_cleans_up_pointers")
        assert await q.data.current_monoton() == 0  # gone: a missing row reads as 0
        assert (await q.data.invis_pointer(), await q.data.reader_bucket()) == (0, 0)
        assert await h.store.read_all("pointer") == [] and await h.store.read_all("monoton") == []
        assert await h.store.read("queue_stats", {"queue_stats_id": q.definition.queue_stats_id}) is None

    sim(body)


def test_counters_work_after_complete_delete():
    async def body(h: Harness):
        q = await h.queue("counters_work_after_complete_delete")
        assert await h.store.read("queue_stats", {"queue_stats_id": q.definition.queue_stats_id}) is None
        assert await q.size() == 0  # a missing counter reads as 0
        await q.put("gone")
        await h.queues.delete("counters_work_after_complete_delete")
        again = await h.queue("counters_work_after_complete_delete")
        assert again.definition.version == 0 and again.definition.queue_stats_id != q.definition.queue_stats_id
        await again.put("0")
        assert await again.size() == 1
        assert (await again.read()).body == "0"  # nothing of the old life is left

    sim(body)


def test_the_list_is_scoped_to_the_account():
    async def body(h: Harness):
        await h.queue("mine")
        other = Queues(h.store, h.rt, "other")
        await other.create(QueueCreateOptions("theirs"))
        await other.create(QueueCreateOptions("gone"))
        await other.delete("gone")
        assert await h.queues.names() == ["mine"]
        assert await other.names() == ["theirs"]
        assert [d.account_name for d in await other.list()] == ["other"]

    sim(body)


def test_only_one_active_ever():
    async def body(h: Harness):
        options = QueueCreateOptions("only_one_active_ever")
        outcomes: list[str] = []

        async def cycle() -> None:
            await h.queues.create(options)
            try:
                await h.queues.delete(options.queue_name)
                outcomes.append("deleted")
            except (QueueAlreadyDeleting, NotFound) as refused:
                outcomes.append(type(refused).__name__)

        tasks = [h.rt.spawn(cycle()) for _ in range(50)]
        for task in tasks:
            await task
        await h.queues.create(options)
        rows = [r for r in await h.store.read_all("queue") if r["queuename"] == options.queue_name]
        assert len(rows) == 1 and rows[0]["status"] == QueueStatus.Active
        q = QueueContext(h, await h.queues.get_active(options.queue_name))
        await q.put("works")  # the surviving life is usable: its monoton and pointers exist
        await q.read_and_ack("works")
        assert await h.store.read_all("deletion_job") == []
        return outcomes

    outcomes = sim(body, slow=True)
    assert len(outcomes) == 50 and outcomes.count("deleted") >= 1
    assert {"QueueAlreadyDeleting", "NotFound"} & set(outcomes)  # the tasks did race


@pytest.mark.parametrize("seed", range(1, 9))
def test_two_deletes_at_once_one_wins(seed):
    async def body(h: Harness):
        await h.queue("twice")
        results: list[str] = []

        async def delete() -> None:
            try:
                await h.queues.delete("twice")
                results.append("ok")
            except (QueueAlreadyDeleting, NotFound) as refused:
                results.append(type(refused).__name__)

        first, second = h.rt.spawn(delete()), h.rt.spawn(delete())
        await first
        await second
        assert await h.queues.get_any("twice") is None
        return sorted(results)

    results = sim(body, seed=seed, slow=True)
    assert results[0] in ("NotFound", "QueueAlreadyDeleting") and results[1] == "ok"


# -- RepairTests -------------------------------------------------------------------------------------

def test_repairer_republishes_newly_visible_in_tombstoned_bucket():  # ★
    async def body(h: Harness):
        q = await h.queue("repairer_republishes", bucket_size=1, repair_worker_poll_seconds=1,
                          repair_worker_finalize_seconds=3, delete_buckets_after_finalize=False)
        worker = h.repair(q)
        await q.put("BOO!")
        original = await q.row(0)
        await h.tick()
        await q.data.tombstone(0)  # sealed before anyone read it: a late write
        await h.tick(5)
        assert await worker.one_pass()
        assert (await q.row(0)).acked
        republished = await q.row(1)
        assert republished.body == "BOO!" and republished.tag != original.tag
        assert (republished.version, republished.delivery_count, republished.acked) == (1, 0, False)
        assert await q.data.finalized(0) and await q.data.repair_bucket() == 1
        assert await q.size() == 1 and worker.republished == 1
        await q.read_and_ack("BOO!")  # the copy is read at the end of the queue

    sim(body)


def test_repairer_waits_for_the_finalize_timeout_after_the_seal():
    async def body(h: Harness):
        q = await h.queue("repair_waits", bucket_size=1, repair_worker_finalize_seconds=15)
        worker = h.repair(q)
        await q.put("late")
        await q.data.tombstone(0)
        sealed = h.rt.now()
        assert await worker.one_pass()
        assert h.rt.now() - sealed == pytest.approx(15, abs=0.01)
        assert (await q.row(0)) is None  # all acked by then, so the bucket was deleted
        assert await q.data.finalized(0)
        assert (await q.row(1)).body == "late"

    sim(body)


def test_repairer_moves_off_ghost_messages():
    async def body(h: Harness):
        q = await h.queue("repairer_moves_off_ghost_messages", bucket_size=2)
        worker = h.repair(q)
        assert await q.data.repair_bucket() == 0
        await q.put("BOO!")
        await h.tick()
        assert await q.data.ack(await q.row(0))
        await q.ghost()
        await h.tick()
        await q.data.tombstone(0)
        await q.put("3rd")
        await h.tick(50)
        assert await worker.one_pass()
        assert await q.data.repair_bucket() == 1
        assert [m.index for m in await q.data.bucket_contents(0)] == [FINALIZER]  # deleted, then finalized

    sim(body)


def test_repairer_finalizes_full_acked_buckets_and_stops_at_an_unsealed_one():
    async def body(h: Harness):
        q = await h.queue("repair_full", bucket_size=2)
        worker = h.repair(q)
        for text in "abcd":
            await q.put(text)
        for text in "abcd":
            await q.read_and_ack(text)
        assert await q.read() is None  # seals buckets 0 and 1; bucket 2 is open
        assert await q.data.reader_bucket() == 2
        assert not await worker.one_pass()  # nothing to watch: both were full and acked
        assert await q.data.repair_bucket() == 2
        for bucket in (0, 1):  # deleted, then the finalizer written
            assert [m.index for m in await q.data.bucket_contents(bucket)] == [FINALIZER]

    sim(body)


class FinalizerFails:
    """A store that fails every write of a finalizer row while ``failing`` (a store that
    times out between a partition delete and the finalizer after it)."""

    def __init__(self, inner: MemoryStore):
        self.inner, self.failing = inner, True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def insert(self, table: str, row: Any, **kw: Any) -> bool:
        if self.failing and table == "message" and row.get("monoton") == FINALIZER:
            raise StoreError("timed out")
        return await self.inner.insert(table, row, **kw)


def test_a_retire_whose_finalizer_failed_is_finished_by_the_next_pass():
    """Deleted partition, no finalizer: the original's repair pointer waits there for a seal
    that never comes (and the invisibility pointer for a finalizer); the lab finishes it."""
    async def body(h: Harness):
        q = await h.queue("half_retired", bucket_size=2)
        store = FinalizerFails(h.store)
        worker = RepairWorker(store, h.rt, q.definition)
        for text in "abcd":
            await q.put(text)
        for text in "abcd":
            await q.read_and_ack(text)
        assert await q.read() is None  # seals buckets 0 and 1
        with pytest.raises(StoreError):
            await worker.one_pass()
        half = (await q.data.bucket_contents(0), await q.data.repair_bucket())
        store.failing = False
        await worker.one_pass()
        return half, await q.data.repair_bucket(), [m.index for m in await q.data.bucket_contents(0)]

    half, pointer, contents = sim(body)
    assert half == ([], 0)  # the partition went, its finalizer did not come
    assert pointer == 2 and contents == [FINALIZER]


def test_repairer_never_moves_past_the_monoton_bucket_and_leaves_dangling_rows():
    async def body(h: Harness):
        q = await h.queue("repair_limit", bucket_size=3, repair_worker_finalize_seconds=1)
        worker = h.repair(q)
        await q.put("leased")
        leased = await q.read(1000)
        await q.data.tombstone(0)
        await h.tick(2)
        assert await worker.one_pass()
        assert await q.data.repair_bucket() == 0  # the monoton is still in bucket 0
        assert worker.dangling == 1 and worker.republished == 0  # delivered rows are the pointer's
        assert await q.data.finalized(0) and await q.row(leased.index) is not None

    sim(body)


def test_the_repair_loop_runs_on_the_runtime_after_its_jitter():
    async def body(h: Harness):
        q = await h.queue("repair_loop", bucket_size=1, repair_worker_poll_seconds=1,
                          repair_worker_finalize_seconds=3)
        worker = h.repair(q)
        await q.put("late")
        await q.data.tombstone(0)
        task = h.rt.spawn(worker.run())
        await h.tick(25)  # start jitter (at most 20 s), the finalize wait, a poll
        assert worker.republished == 1 and (await q.row(1)).body == "late"
        worker.stop()
        await h.tick(2)
        assert task.done()

    sim(body)


@pytest.mark.parametrize("delete_buckets", [True, False])
def test_a_republished_original_holds_the_invisibility_pointer_unless_its_bucket_is_deleted(delete_buckets):
    """The original's §4.3 step "a row with delivery_count 0 stops the pointer" does not skip
    acked rows, so the acked original of a republished message stops the pointer for good
    when buckets are kept: an expired lease behind the reader is then never redelivered.
    Kept as the original has it; with the default (delete), the bucket goes and the pointer
    steps over its finalizer."""
    async def body(h: Harness):
        q = await h.queue("held", bucket_size=1, repair_worker_finalize_seconds=1,
                          delete_buckets_after_finalize=delete_buckets)
        worker = h.repair(q)
        await q.put("late")
        await q.data.tombstone(0)
        await h.tick(2)
        assert await worker.one_pass() and worker.republished == 1
        await q.read_and_ack("late")
        await q.put("abandoned")
        await q.put("next")
        await q.read(1)  # leased and never acked
        await q.read_and_ack("next")
        await h.tick(2)
        for _ in range(3):
            await worker.one_pass()
        again = await q.read(10)
        return None if again is None else again.body

    assert sim(body) == ("abandoned" if delete_buckets else None)


# -- ★ StandardApiTests at the core: the lookups an HTTP request does, then the core ----------------

def test_client_can_create_put_and_ack():  # ★ test_client_can_create_put_and_ack
    async def body(h: Harness):
        await h.queues.create(QueueCreateOptions("api"))
        definition = await h.queues.require_active("api", "putMessage")
        q = QueueContext(h, definition)
        await q.put("\"hi\"")
        delivery = await q.read(30)
        assert delivery.to_json() == {"popReceipt": delivery.pop_receipt, "message": "\"hi\"",
                                      "deliveryCount": 0, "messageTag": delivery.tag}
        await q.mq.ack(delivery.pop_receipt)

    sim(body)


def test_initial_invis_respected_over_five_gets():  # ★ initial_invis_respected (HTTP form)
    async def body(h: Harness):
        q = await h.queue("initial_invis_respected")
        for text, delay in (("0", 0), ("4", 400000), ("3", 300000), ("2", 200000), ("1", 0)):
            await q.put(text, delay)
        got = [await q.read(10000) for _ in range(5)]
        return [d.body for d in got if d is not None]

    assert sim(body) == ["0", "1"]


def test_update_message_then_ack_with_the_new_receipt():  # ★ update_message
    async def body(h: Harness):
        q = await h.queue("update_message")
        await q.put("foo")
        delivery = await q.read()
        updated = await q.mq.update(delivery.pop_receipt, "foo2", 10)
        assert updated.pop_receipt != delivery.pop_receipt
        await q.mq.ack(updated.pop_receipt)
        assert await q.read() is None

    sim(body)


def test_multiple_parallel_readers():  # ★ test_multiple_parallel_readers (the core, no HTTP)
    messages = 250

    async def body(h: Harness):
        q = await h.queue("parallel", delete_buckets_after_finalize=False, repair_worker_poll_seconds=1)
        repair = h.rt.spawn(h.repair(q).run())
        received: set[int] = set()
        done = h.rt.event()

        async def publisher(i: int) -> None:
            await q.put(str(i))

        async def worker(bad: bool) -> None:
            while not done.is_set():
                delivery = await q.read(10)
                if delivery is None:
                    await h.tick(1)
                elif not bad:  # the bad worker abandons every lease
                    await q.mq.ack(delivery.pop_receipt)
                    received.add(int(delivery.body))
                    if len(received) == messages:
                        done.set()
                await h.tick(0.05)

        publishers = [h.rt.spawn(publisher(i)) for i in range(messages)]
        workers = [h.rt.spawn(worker(bad=False)) for _ in range(10)] + [h.rt.spawn(worker(bad=True))]
        assert await h.rt.wait(done, 600), f"only {len(received)} of {messages} received"
        for task in publishers + workers:
            await task
        repair.cancel()
        rows = [m for b in range(messages) for m in await q.data.bucket(b)]
        assert all(m.acked for m in rows)
        assert len({m.body for m in rows if m.acked and m.delivery_count > 0}) == messages
        assert await q.size() == 0
        return received

    assert sim(body, slow=True) == set(range(250))


# -- the store retry (SessionProxy) -------------------------------------------------------------------

class FlakyStore:
    """A MemoryStore whose next ``failures`` statements of one kind raise StoreError."""

    def __init__(self, inner: MemoryStore, method: str, failures: int):
        self.inner, self.method, self.failures = inner, method, failures

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)
        if name != self.method:
            return method

        async def flaky(*args: Any, **kwargs: Any) -> Any:
            if self.failures > 0:
                self.failures -= 1
                raise StoreError("timed out")
            return await method(*args, **kwargs)

        return flaky


@pytest.mark.parametrize("failures, succeeds, waited", [(0, True, 0.0), (2, True, 0.006), (3, False, 0.006)])
def test_a_cas_that_times_out_is_tried_three_times_with_exponential_waits(failures, succeeds, waited):
    async def body(h: Harness):
        q = await h.queue("retry")
        flaky = FlakyStore(h.store, "update", failures)
        mq = MessageQueue(RetryingStore(flaky, h.rt), h.rt, q.definition, h.queues)
        start = h.rt.now()
        try:
            await mq.put("x")
            ok = True
        except StoreError:
            ok = False
        return ok, h.rt.now() - start, flaky.failures

    ok, elapsed, left = sim(body)
    assert ok is succeeds and elapsed == pytest.approx(waited, abs=1e-6) and left == 0


def test_a_counter_is_not_retried():
    async def body(h: Harness):
        q = await h.queue("counter")
        flaky = FlakyStore(h.store, "add", 1)
        with pytest.raises(StoreError):
            await MessageQueue(RetryingStore(flaky, h.rt), h.rt, q.definition).put("x")
        assert (await q.row(0)).body == "x" and await q.size() == 0  # stored, but not counted twice

    sim(body)


def test_a_json_number_with_no_fraction_is_a_whole_number_and_one_with_a_fraction_is_not():
    """JSON Schema's ``integer`` (and the original's Jackson) read 3.0 as 3 (schemathesis ST202)."""
    assert QueueCreateOptions.from_json({"queueName": "q", "bucketSize": 3.0}).bucket_size == 3
    with pytest.raises(InvalidOptions):
        QueueCreateOptions.from_json({"queueName": "q", "bucketSize": 3.5})
