"""Queuefka's broker as its callers see it: its configuration, a fetch's answer, and the
refusals a request can meet (with the name checks that raise them) — what the HTTP front,
the driver and the node take from the core besides ``QueuefkaCore`` itself."""

from __future__ import annotations

from dataclasses import dataclass

from lab.backends.queuefka.core.groups import check_group_name
from lab.backends.queuefka.core.writer import DEFAULT_SEGMENT_SIZE, FsyncPolicy

MAX_FETCH = 10_000


@dataclass(frozen=True)
class Fetched:
    records: list[tuple[int, bytes]]
    next: int  # commit this to acknowledge every record up to here
    epoch: int | None = None  # the broker's incarnation that handed them out: commit with it


class UnknownTopic(LookupError):
    pass


class UnknownGroup(LookupError):
    pass


class GroupExists(ValueError):
    """Creating a group that exists already; nothing was done."""


class BadRequest(ValueError):
    """The request is malformed (a name, mode, count or address); nothing was done."""


class LeaseLost(Exception):
    """A commit of records this incarnation of the broker never handed out (fetched before
    a restart, or past every record handed out); nothing was acknowledged, and the records
    that are still unacknowledged come back."""


@dataclass
class Config:
    segment_size_hint: int = DEFAULT_SEGMENT_SIZE
    fsync: str = "never"  # the original never fsynced
    retention_age: float | None = None  # seconds; None keeps every segment
    retention_interval: float = 1.0
    #: at-least-once: records fetched and not committed are handed out again once the
    #: session that fetched them has been idle this long (or closed its connection)
    session_timeout: float = 10.0

    def __post_init__(self) -> None:
        FsyncPolicy.parse(self.fsync)
        if self.segment_size_hint < 0:
            raise ValueError(f"segment_size_hint must be >= 0, not {self.segment_size_hint}")


def check_topic_name(name: str) -> str:
    try:
        return check_group_name(name)
    except ValueError:
        raise BadRequest(f"topic name {name!r}: use 1-64 letters, digits, '.', '_' or '-', "
                         "starting with a letter or digit") from None


def check_group(name: str) -> str:
    try:
        return check_group_name(name)
    except ValueError as e:
        raise BadRequest(str(e)) from None
