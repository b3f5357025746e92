"""Queuefka as an embeddable synchronous library on a folder of plain files.

The core's Writer, Reader and Consumer (``lab.backends.queuefka.core``) run on the Store
port with their clock and lock passed in; here they get what an embedding program has:
a ``FileStore`` on the topic's folder, the monotonic clock, a thread lock for writes,
``time.sleep`` for ``Reader.follow``, and the collector held off during batch reads.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from typing import Any, Iterator

from lab.backends.queuefka.core import groups, reader, writer
from lab.backends.queuefka.core.framing import DEFAULT_MAX_RECORD, CorruptRecord
from lab.backends.queuefka.core.groups import apply_retention, committed_offsets
from lab.backends.queuefka.core.reader import AddressError
from lab.backends.queuefka.core.writer import DEFAULT_SEGMENT_SIZE, FsyncPolicy, WriteError
from lab.design.worlds import FileStore
from lab.design import Store

__all__ = ["Writer", "Reader", "Consumer", "CorruptRecord", "AddressError", "FsyncPolicy", "WriteError",
           "apply_retention", "committed_offsets"]

Topic = str | os.PathLike | Store


def topic_store(topic: Topic, create: bool = False) -> Store:
    """The Store of ``topic``: a folder path becomes a ``FileStore``; a Store is kept."""
    return FileStore(topic, create=create) if isinstance(topic, (str, os.PathLike)) else topic


class Writer(writer.Writer):
    """Appends records to a topic folder; thread-safe for writes, fsync interval on the
    monotonic clock; one Writer per folder (``flock``). Opening it recovers the log: a
    torn tail is cut, and a group committed past the end is committed at the end."""

    def __init__(self, topic: Topic, segment_size_hint: int = DEFAULT_SEGMENT_SIZE, *,
                 fsync: FsyncPolicy | str = "never", max_payload: int = DEFAULT_MAX_RECORD):
        super().__init__(topic_store(topic, create=True), segment_size_hint, fsync=fsync, max_payload=max_payload,
                         clock=time.monotonic, lock=threading.Lock())
        groups.clamp_commits(self.store, self.address)  # before a record is written behind a commit


class Reader(reader.Reader):
    """Reads a topic folder from ``address``; ``follow`` waits for records appended later."""

    def __init__(self, topic: Topic, address: int = 0, **options: Any):
        super().__init__(topic_store(topic), address, **options)

    def read_many(self, max_count: int = 4096) -> list[tuple[int, bytes]]:
        # Thousands of new tuples hold only ints and bytes: no cycles for the collector to
        # find, but each 700 allocations it would scan them again (a quarter of the time).
        collecting = gc.isenabled()
        gc.disable()
        try:
            return super().read_many(max_count)
        finally:
            if collecting:
                gc.enable()

    def follow(self, poll: float = 0.05, timeout: float | None = None) -> Iterator[tuple[int, bytes]]:
        """Records as they are appended, waiting ``poll`` seconds between looks at the end;
        stops after ``timeout`` seconds without a new record (None: never)."""
        idle = 0.0
        while True:
            batch = self.read_many()
            if batch:
                idle = 0.0
                yield from batch
                continue
            if timeout is not None and idle >= timeout:
                return
            time.sleep(poll)
            idle += poll


class Consumer(groups.Consumer):
    """A consumer group member on a topic folder (see ``core.groups.Consumer``)."""

    reader_class = Reader

    def __init__(self, topic: Topic, group: str, mode: str = "at-least-once", **options: Any):
        super().__init__(topic_store(topic, create=True), group, mode, **options)
