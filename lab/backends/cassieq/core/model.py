"""CassieQ's values: queue definitions and create options, statuses, pop receipts, message
rows and what a get hands out (spec §1 and §3).

Pure data and its encodings; no store, no clock. Randomness (message tags, stats ids) is
drawn from the ``random.Random`` a caller passes in: the Runtime's.
"""

from __future__ import annotations

import base64
import binascii
import re
import uuid
from dataclasses import dataclass, field, replace
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Mapping

from lab.backends.cassieq.core.errors import BadPopReceipt, InvalidName, InvalidOptions

if TYPE_CHECKING:
    import random

NAME_PATTERN = re.compile(r"[a-zA-Z_\-0-9.]+")

#: marker rows sharing a bucket's partition (spec §3): the seal and the repair worker's "done"
TOMBSTONE = -2
FINALIZER = -3

#: pointer types of the ``pointer`` table
READER_POINTER = "BUCKET_POINTER"
INVISIBILITY_POINTER = "INVISIBILITY_POINTER"
REPAIR_POINTER = "REPAIR_BUCKET"

#: defaults of QueueCreateOptions / QueueDefinition (spec §3)
DEFAULT_BUCKET_SIZE = 20
DEFAULT_MAX_DELIVERY_COUNT = 5
DEFAULT_REPAIR_POLL_SECONDS = 5
DEFAULT_FINALIZE_SECONDS = 15
DEFAULT_GET_INVISIBILITY_SECONDS = 30


def valid_name(name: Any, what: str = "name") -> str:
    """A trimmed account, queue or key name, or ``InvalidName``."""
    if not isinstance(name, str):
        raise InvalidName(f"a {what} must be a string, got {name!r}")
    trimmed = name.strip()
    if not NAME_PATTERN.fullmatch(trimmed):
        raise InvalidName(f"invalid {what} {name!r}: use letters, digits, '_', '-' and '.'")
    return trimmed


def queue_id(account: str, queue: str, version: int) -> str:
    """The physical queue id every message, monoton and pointer row is keyed by."""
    return f"{account}:{queue}_v{version}"


def bucket_of(index: int, bucket_size: int) -> int:
    """The bucket of a message id. Java's long division truncates toward zero, so the
    invisibility pointer's initial -1 lies in bucket 0 (spec §4.3: "B = 0 if p <= 0")."""
    return 0 if index <= 0 else index // bucket_size


def millis(seconds: float) -> int:
    """Seconds on the Runtime's clock as the store's timestamps: int milliseconds."""
    return int(round(seconds * 1000))


def new_tag(rng: "random.Random") -> str:
    """A message tag: 4 random bytes, standard Base64 without padding (6 characters)."""
    return base64.b64encode(rng.getrandbits(32).to_bytes(4, "big")).decode("ascii").rstrip("=")


def new_stats_id(rng: "random.Random", queue: str) -> str:
    """A fresh size-counter key, ``<uuid>_<queueId>``: new on every (re)create (issue #47)."""
    return f"{uuid.UUID(int=rng.getrandbits(128), version=4)}_{queue}"


class QueueStatus(IntEnum):
    """A queue row's life; it only moves forward (spec §3). Names are the JSON spellings."""

    Provisioning = 0
    Active = 1
    PendingDelete = 2
    Deleting = 3
    Inactive = 4


@dataclass(frozen=True)
class QueueDefinition:
    """One row of the ``queue`` table: the current life of a queue name."""

    account_name: str
    queue_name: str
    bucket_size: int = DEFAULT_BUCKET_SIZE
    max_delivery_count: int = DEFAULT_MAX_DELIVERY_COUNT
    status: QueueStatus = QueueStatus.Active
    version: int = 0
    repair_worker_poll_seconds: int = DEFAULT_REPAIR_POLL_SECONDS
    repair_worker_finalize_seconds: int = DEFAULT_FINALIZE_SECONDS
    delete_buckets_after_finalization: bool = True
    queue_stats_id: str = ""
    dlq_name: str | None = None
    strict_fifo: bool = True

    @property
    def id(self) -> str:
        return queue_id(self.account_name, self.queue_name, self.version)

    def to_json(self) -> dict[str, Any]:
        """The original's QueueDefinition bean (``dlqName`` is null when there is none)."""
        return {
            "accountName": self.account_name,
            "queueName": self.queue_name,
            "bucketSize": self.bucket_size,
            "maxDeliveryCount": self.max_delivery_count,
            "status": self.status.name,
            "version": self.version,
            "repairWorkerPollFrequencySeconds": self.repair_worker_poll_seconds,
            "repairWorkerTombstonedBucketTimeoutSeconds": self.repair_worker_finalize_seconds,
            "deleteBucketsAfterFinalization": self.delete_buckets_after_finalization,
            "queueStatsId": self.queue_stats_id,
            "dlqName": self.dlq_name,
            "strictFifo": self.strict_fifo,
            "id": self.id,
        }

    def to_row(self) -> dict[str, Any]:
        return {
            "account_name": self.account_name,
            "queuename": self.queue_name,
            "queue_stats_id": self.queue_stats_id,
            "bucket_size": self.bucket_size,
            "max_delivery_count": self.max_delivery_count,
            "status": int(self.status),
            "repair_worker_poll_freq_seconds": self.repair_worker_poll_seconds,
            "repair_worker_tombstone_bucket_timeout_seconds": self.repair_worker_finalize_seconds,
            "delete_buckets_after_finalization": self.delete_buckets_after_finalization,
            "dlq_queue_name": self.dlq_name,
            "version": self.version,
            "strict_fifo": self.strict_fifo,
        }

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "QueueDefinition":
        def given(column: str, default: Any) -> Any:
            value = row.get(column)
            return default if value is None else value

        return cls(
            account_name=row["account_name"],
            queue_name=row["queuename"],
            bucket_size=given("bucket_size", DEFAULT_BUCKET_SIZE),
            max_delivery_count=given("max_delivery_count", DEFAULT_MAX_DELIVERY_COUNT),
            status=QueueStatus(given("status", QueueStatus.Active)),
            version=given("version", 0),
            repair_worker_poll_seconds=given("repair_worker_poll_freq_seconds", DEFAULT_REPAIR_POLL_SECONDS),
            repair_worker_finalize_seconds=given("repair_worker_tombstone_bucket_timeout_seconds",
                                                 DEFAULT_FINALIZE_SECONDS),
            delete_buckets_after_finalization=bool(given("delete_buckets_after_finalization", True)),
            queue_stats_id=given("queue_stats_id", ""),
            dlq_name=row.get("dlq_queue_name"),
            strict_fifo=bool(given("strict_fifo", True)),
        )


def json_whole(value: Any) -> Any:
    """A JSON number with no fraction (``731.0``) as the int it is, as JSON Schema's
    ``integer`` and the original's Jackson read it; anything else unchanged."""
    if type(value) is float and value.is_integer() and abs(value) < 2 ** 63:
        return int(value)
    return value


def _whole(value: Any, what: str, minimum: int) -> int:
    value = json_whole(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidOptions(f"{what} must be a whole number, got {value!r}")
    if value < minimum:
        raise InvalidOptions(f"{what} must be at least {minimum}, got {value}")
    return value


@dataclass(frozen=True)
class QueueCreateOptions:
    """What a create asks for (spec §1). ``strict_fifo`` is not in the original's HTTP options
    (always true there); the core takes it so the random pick can be exercised."""

    queue_name: str
    bucket_size: int = DEFAULT_BUCKET_SIZE
    max_delivery_count: int = DEFAULT_MAX_DELIVERY_COUNT
    repair_worker_poll_seconds: int = DEFAULT_REPAIR_POLL_SECONDS
    repair_worker_finalize_seconds: int = DEFAULT_FINALIZE_SECONDS
    delete_buckets_after_finalize: bool = True
    dlq_name: str | None = None
    strict_fifo: bool = True

    def __post_init__(self) -> None:
        # checked here so no invalid options object exists; a bucket of 0 would divide by zero
        # and a poll of 0 would spin the repair worker (the original checked only the name)
        object.__setattr__(self, "queue_name", valid_name(self.queue_name, "queue name"))
        if self.dlq_name is not None:
            object.__setattr__(self, "dlq_name", valid_name(self.dlq_name, "DLQ name"))
        _whole(self.bucket_size, "bucketSize", 1)
        _whole(self.max_delivery_count, "maxDeliveryCount", 1)
        _whole(self.repair_worker_poll_seconds, "repairWorkerPollSeconds", 1)
        _whole(self.repair_worker_finalize_seconds, "repairWorkerBucketFinalizeTimeSeconds", 0)
        for flag, what in ((self.delete_buckets_after_finalize, "deleteBucketsAfterFinalize"),
                           (self.strict_fifo, "strictFifo")):
            if not isinstance(flag, bool):
                raise InvalidOptions(f"{what} must be true or false, got {flag!r}")

    @classmethod
    def from_json(cls, body: Any, *, accept_dlq: bool = True) -> "QueueCreateOptions":
        """Options from the create request's JSON (unknown fields ignored; null means the
        default). ``accept_dlq=False`` reproduces the original's HTTP gap (``dlqName`` never
        reached the definition)."""
        if not isinstance(body, Mapping):
            raise InvalidOptions("the create options must be a JSON object")
        if body.get("queueName") is None:
            raise InvalidOptions("queueName is required")

        def given(key: str, default: Any) -> Any:
            value = body.get(key)
            return default if value is None else value

        return cls(
            queue_name=body["queueName"],
            bucket_size=given("bucketSize", DEFAULT_BUCKET_SIZE),
            max_delivery_count=given("maxDeliveryCount", DEFAULT_MAX_DELIVERY_COUNT),
            repair_worker_poll_seconds=given("repairWorkerPollSeconds", DEFAULT_REPAIR_POLL_SECONDS),
            repair_worker_finalize_seconds=given("repairWorkerBucketFinalizeTimeSeconds", DEFAULT_FINALIZE_SECONDS),
            delete_buckets_after_finalize=given("deleteBucketsAfterFinalize", True),
            dlq_name=given("dlqName", None) if accept_dlq else None,
        )

    def definition(self, account: str, *, version: int = 0, queue_stats_id: str = "",
                   status: QueueStatus = QueueStatus.Provisioning) -> QueueDefinition:
        return QueueDefinition(
            account_name=account, queue_name=self.queue_name, bucket_size=self.bucket_size,
            max_delivery_count=self.max_delivery_count, status=status, version=version,
            repair_worker_poll_seconds=self.repair_worker_poll_seconds,
            repair_worker_finalize_seconds=self.repair_worker_finalize_seconds,
            delete_buckets_after_finalization=self.delete_buckets_after_finalize,
            queue_stats_id=queue_stats_id, dlq_name=self.dlq_name, strict_fifo=self.strict_fifo)


@dataclass(frozen=True)
class DeletionJob:
    """One row of ``deletion_job``: what a delete must clean up of one queue life."""

    account_name: str
    queue_name: str
    version: int
    bucket_size: int
    queue_stats_id: str

    @property
    def queue_id(self) -> str:
        return queue_id(self.account_name, self.queue_name, self.version)

    @classmethod
    def of(cls, definition: QueueDefinition) -> "DeletionJob":
        return cls(definition.account_name, definition.queue_name, definition.version,
                   definition.bucket_size, definition.queue_stats_id)

    def to_row(self) -> dict[str, Any]:
        return {"account_name": self.account_name, "queuename": self.queue_name, "version": self.version,
                "bucket_size": self.bucket_size, "queue_stats_id": self.queue_stats_id}


@dataclass(frozen=True)
class PopReceipt:
    """``<monoton>:<version>:<tag>`` in standard Base64 without padding (spec §1)."""

    index: int
    version: int
    tag: str

    def encode(self) -> str:
        text = f"{self.index}:{self.version}:{self.tag}"
        return base64.b64encode(text.encode("utf-8")).decode("ascii").rstrip("=")

    def __str__(self) -> str:
        return self.encode()

    @classmethod
    def decode(cls, receipt: Any) -> "PopReceipt":
        """The receipt's parts, or ``BadPopReceipt`` (an unencoded ``+`` arrives as a space
        and lands here too)."""
        if not isinstance(receipt, str) or not receipt:
            raise BadPopReceipt(f"a pop receipt must be a non-empty string, got {receipt!r}")
        padded = receipt + "=" * (-len(receipt) % 4)
        try:
            text = base64.b64decode(padded, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            raise BadPopReceipt(f"pop receipt {receipt!r} is not standard Base64 of text "
                                "(URL-encode '+' and '/' in the query string)") from None
        parts = text.split(":")
        if len(parts) != 3 or not parts[2]:
            raise BadPopReceipt(f"pop receipt {receipt!r} does not decode to <monoton>:<version>:<tag>")
        try:
            return cls(int(parts[0]), int(parts[1]), parts[2])
        except ValueError:
            raise BadPopReceipt(f"pop receipt {receipt!r} has a monoton or version that is not a number") from None


@dataclass(frozen=True)
class Message:
    """One row of the ``message`` table (a marker row has a negative index)."""

    index: int
    body: str | None
    version: int
    delivery_count: int
    acked: bool
    next_visible_on: int | None  # ms
    tag: str | None
    created_date: int | None = None  # ms
    updated_date: int | None = None  # ms

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "Message":
        return cls(index=row["monoton"], body=row.get("message"), version=row.get("version") or 0,
                   delivery_count=row.get("delivery_count") or 0, acked=bool(row.get("acked")),
                   next_visible_on=row.get("next_visible_on"), tag=row.get("tag"),
                   created_date=row.get("created_date"), updated_date=row.get("updated_date"))

    @property
    def is_marker(self) -> bool:
        return self.index in (TOMBSTONE, FINALIZER)

    def visible(self, now_ms: int) -> bool:
        """Visible once ``next_visible_on <= now`` (inclusive, as the original)."""
        return self.next_visible_on is None or self.next_visible_on <= now_ms

    @property
    def receipt(self) -> PopReceipt:
        return PopReceipt(self.index, self.version, self.tag or "")

    def with_version(self, version: int) -> "Message":
        return replace(self, version=version)


@dataclass(frozen=True)
class Delivery:
    """What a get hands out: the row as read, with the version the consume wrote.
    ``delivery_count`` counts the *earlier* deliveries (0 on the first, spec §1)."""

    index: int
    version: int
    body: str
    delivery_count: int
    tag: str
    pop_receipt: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "pop_receipt", PopReceipt(self.index, self.version, self.tag).encode())

    @classmethod
    def of(cls, message: Message) -> "Delivery":
        return cls(message.index, message.version, message.body or "", message.delivery_count, message.tag or "")

    def to_json(self) -> dict[str, Any]:
        return {"popReceipt": self.pop_receipt, "message": self.body, "deliveryCount": self.delivery_count,
                "messageTag": self.tag}


@dataclass(frozen=True)
class Updated:
    """What an update answers: the new receipt (the old one is dead) and the unchanged tag."""

    pop_receipt: str
    message_tag: str

    def to_json(self) -> dict[str, Any]:
        return {"popReceipt": self.pop_receipt, "messageTag": self.message_tag}
