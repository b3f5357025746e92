"""Log queues (slides S15-S17): created up front with a retention; append-only ranges made
as the log grows, each replicated along a chain; consumer groups with checkpoints.

- A range covers ``range_size`` offsets and has a chain: the node that opens it (its
  head, the log's sequencer while the range lasts) and W-1 up peers, shuffled. The head
  numbers each record and passes it down the chain; the tail's answer comes back and the
  producer gets the offset. The head then raises the log's **high watermark** — the
  highest offset below which every record is on every replica of its chain — in the
  cluster metadata: consumers read up to it and no further.
- Appends on other nodes are forwarded to the head. If the head is down, the appender
  takes over: it asks the chain's other members for the last offset they hold (every
  acknowledged record is on all of them) and opens a new range after it. Under a
  net-split, both sides may take over with the same start; the metadata then keeps one
  range, and the other side's records after the split are lost (logs promise less than
  queues under splits; ``lab backends`` says so).
- A read of group G on a node continues from the node's cursor for G, or from G's
  checkpoint (replicated, the highest wins) if that is further on; consumers of one group
  on one node share the stream, on different nodes each starts at the checkpoint (at
  least once). Records are read locally when the node is in the range's chain, else from
  a chain member.
- Retention drops, on each node, records older than the log's retention.
"""

from __future__ import annotations

import math
from typing import Any

from lab.backends.primer.core import aof, aof_records
from lab.backends.primer.core.broadcast import Broadcast
from lab.backends.primer.core.config import AOF, NodeConfig, check_name
from lab.backends.primer.core.errors import BadRequest, Conflict, NotFound, Unavailable
from lab.backends.primer.core.membership import Membership
from lab.backends.primer.core.messages import AppendRecord, LastOffset, ReadRecords
from lab.backends.primer.core.metadata import MetaEntry, Metadata
from lab.design.runtime import CallTimeout, RemoteError, Runtime, Unreachable

MAX_READ = 1000


def _range_key(log: str, start: int) -> str:
    return f"range/{log}/{start:015d}"


class Logs:
    def __init__(self, rt: Runtime, config: NodeConfig, membership: Membership, broadcast: Broadcast,
                 meta: Metadata, store: Any = None):
        self.rt, self.config = rt, config
        self.name = config.name
        self.membership, self.broadcast, self.meta = membership, broadcast, meta
        self.store = store if config.persistence == AOF else None
        self.files: dict[str, aof.AofFile] = {}
        self.records: dict[str, dict[int, tuple[int, bytes]]] = {}  # log -> offset -> (put_ns, payload)
        self.next_offset: dict[str, int] = {}  # log -> the next offset this node numbers (as a head)
        self.committed: dict[str, set[int]] = {}  # log -> committed offsets above the high watermark
        self.cursors: dict[tuple[str, str], int] = {}  # (log, group) -> next offset handed out here
        for prefix in ("log/", "range/", "hwm/", "ckpt/"):
            meta.listen(prefix, self._persist_meta)

    # ------------------------------------------------------------------ files
    def _file(self, log: str) -> aof.AofFile | None:
        if self.store is None:
            return None
        f = self.files.get(log)
        if f is None:
            f = self.files[log] = aof.AofFile(self.store, f"log.{log}.aof")
        return f

    def _persist_meta(self, entry: MetaEntry) -> None:
        _, log, *rest = entry.key.split("/")
        f = self._file(log)
        if f is None:
            return
        if entry.key.startswith("log/"):
            f.append(aof_records.LogCreated(entry.value["retention_s"]))
        elif entry.key.startswith("range/"):
            f.append(aof_records.Range(entry.value["start"], tuple(entry.value["chain"])))
        elif entry.key.startswith("hwm/"):
            f.append(aof_records.HighWatermark(entry.value))
        else:
            f.append(aof_records.Checkpoint(rest[0], entry.value))

    def recover(self) -> None:
        """Load every log file: its records, and its metadata at the lowest version (what
        the peers hold wins when anti-entropy brings it)."""
        if self.store is None:
            return
        for name in sorted(self.store.names()):
            if not (name.startswith("log.") and name.endswith(".aof")):
                continue
            log = name[len("log."):-len(".aof")]
            f = self.files[log] = aof.AofFile(self.store, name)
            held = self.records.setdefault(log, {})
            entries: list[MetaEntry] = []
            for record in f.recover():
                if isinstance(record, aof_records.Append):
                    held[record.offset] = (record.put_ns, record.payload)
                elif isinstance(record, aof_records.Trim):
                    for offset in [o for o in held if o < record.first]:
                        del held[offset]
                elif isinstance(record, aof_records.LogCreated):
                    entries.append(MetaEntry(f"log/{log}", {"retention_s": record.retention_s}, (0, "")))
                elif isinstance(record, aof_records.Range):
                    entries.append(MetaEntry(_range_key(log, record.start),
                                             {"start": record.start, "chain": list(record.replicas)}, (0, "")))
                elif isinstance(record, aof_records.HighWatermark):
                    entries.append(MetaEntry(f"hwm/{log}", record.offset, (0, "")))
                elif isinstance(record, aof_records.Checkpoint):
                    entries.append(MetaEntry(f"ckpt/{log}/{record.group}", record.offset, (0, "")))
            store, self.store = self.store, None  # recovered entries are on file already
            for entry in entries:
                self.meta.merge(entry.msg_id, entry)
            self.store = store

    # ------------------------------------------------------------------ creating
    async def create(self, log: str, retention_s: float) -> bool:
        check_name("log", log)
        if isinstance(retention_s, bool) or not isinstance(retention_s, (int, float)) \
                or not math.isfinite(retention_s) or retention_s <= 0:
            raise BadRequest(f"retention_s {retention_s!r}: use a number of seconds > 0")
        existing = self.meta.get(f"log/{log}")
        if existing is not None:
            if existing["retention_s"] != retention_s:
                raise Conflict(f"log {log} exists with retention_s {existing['retention_s']}")
            return False
        self.broadcast.broadcast(self.meta.name, self.meta.entry(f"log/{log}", {"retention_s": float(retention_s)}))
        return True

    def require(self, log: str) -> dict[str, Any]:
        check_name("log", log)
        found = self.meta.get(f"log/{log}")
        if found is None:
            raise NotFound(f"no log {log} (create it first: PUT /logs/{log})")
        return found

    def ranges(self, log: str) -> list[dict[str, Any]]:
        return [self.meta.get(key) for key in self.meta.keys(f"range/{log}/")]

    def high_watermark(self, log: str) -> int:
        return self.meta.get(f"hwm/{log}", -1)

    def _open_range(self, log: str, start: int) -> dict[str, Any]:
        w = self.config.replicas
        peers = self.membership.up_peers()
        self.rt.random.shuffle(peers)
        if len(peers) < w - 1:
            raise Unavailable(f"replicas={w}, but only {len(peers) + 1} members are up here")
        value = {"start": start, "chain": [self.name, *peers[:w - 1]]}
        self.broadcast.broadcast(self.meta.name, self.meta.entry(_range_key(log, start), value))
        self.next_offset[log] = start
        return value

    # ------------------------------------------------------------------ appending
    async def append(self, log: str, payload: bytes) -> int:
        self.require(log)
        ranges = self.ranges(log)
        if not ranges:
            self._open_range(log, 0)
            return await self._append_as_head(log, payload)
        head = ranges[-1]["chain"][0]
        if head == self.name:
            return await self._append_as_head(log, payload)
        if not self.membership.up(head):
            await self._take_over(log, ranges[-1])
            return await self._append_as_head(log, payload)
        try:
            return await self.rt.net.call(head, AppendRecord(log, payload), self.config.timeout * len(ranges[-1]["chain"]))
        except RemoteError as e:
            raise e.error if isinstance(e.error, Unavailable) else Unavailable(str(e)) from None
        except (CallTimeout, Unreachable) as e:
            raise Unavailable(f"the head of log {log}'s range, {head}, did not answer: {e}") from None

    async def _take_over(self, log: str, current: dict[str, Any]) -> None:
        last = max(self.high_watermark(log), max(self.records.get(log, {}), default=-1))
        reached = 0
        for member in current["chain"][1:]:
            if member == self.name:
                reached += 1
                continue
            try:
                last = max(last, await self.rt.net.call(member, LastOffset(log), self.config.timeout))
                reached += 1
            except (CallTimeout, Unreachable, RemoteError):
                pass
        if reached == 0 and len(current["chain"]) > 1:
            raise Unavailable(f"log {log}: its range's head {current['chain'][0]} is down and no other member "
                              "of the chain answers")
        self._open_range(log, last + 1)

    async def _append_as_head(self, log: str, payload: bytes) -> int:
        current = self.ranges(log)[-1]
        if current["chain"][0] != self.name:
            raise Unavailable(f"log {log}: another node took over its range while this append waited")
        offset = self.next_offset.setdefault(log, max(current["start"], max(self.records.get(log, {}), default=-1) + 1))
        if offset >= current["start"] + self.config.range_size:
            current = self._open_range(log, offset)
        self.next_offset[log] = offset + 1
        put_ns = self.rt.now_ns()
        await self.on_append(AppendRecord(log, payload, offset, put_ns, tuple(current["chain"][1:])))
        self._commit(log, offset, current["start"])
        return offset

    async def on_append(self, request: AppendRecord) -> int:
        """A chain member's append (a head forwards a new record here when it is not the head)."""
        if request.offset < 0:  # an append forwarded to this node as the head
            if not self._is_head(request.log):
                raise Unavailable(f"{self.name} is not the head of log {request.log}'s range")
            return await self.append(request.log, request.payload)
        self.records.setdefault(request.log, {})[request.offset] = (request.put_ns, request.payload)
        f = self._file(request.log)
        if f is not None:
            f.append(aof_records.Append(request.offset, request.put_ns, request.payload))
        if request.chain:
            try:
                await self.rt.net.call(request.chain[0], AppendRecord(request.log, request.payload, request.offset,
                                                                      request.put_ns, request.chain[1:]),
                                       self.config.timeout * len(request.chain))
            except (CallTimeout, Unreachable, RemoteError) as e:
                raise Unavailable(f"log {request.log}: the chain broke after {self.name}: {e}") from None
        if f is not None:
            pending = f.sync()
            if pending is not None:
                await pending
        return request.offset

    def _is_head(self, log: str) -> bool:
        ranges = self.ranges(log)
        return bool(ranges) and ranges[-1]["chain"][0] == self.name

    def _commit(self, log: str, offset: int, range_start: int) -> None:
        """Raise the high watermark over the contiguous committed offsets. A head's range
        starts after what the previous range's chain holds, so everything below its start
        counts as committed (a takeover's start is past every acknowledged record)."""
        done = self.committed.setdefault(log, set())
        done.add(offset)
        hwm = self.high_watermark(log)
        advanced = max(hwm, range_start - 1)
        while advanced + 1 in done:
            advanced += 1
            done.discard(advanced)
        if advanced > hwm:
            self.broadcast.broadcast(self.meta.name, MetaEntry(f"hwm/{log}", advanced, (0, self.name)))

    def on_last_offset(self, request: LastOffset) -> int:
        return max(self.records.get(request.log, {}), default=-1)

    def on_read(self, request: ReadRecords) -> list[tuple[int, bytes]]:
        held = self.records.get(request.log, {})
        return [(o, held[o][1]) for o in range(request.first, request.last + 1) if o in held]

    # ------------------------------------------------------------------ reading
    async def read(self, log: str, group: str, max_records: int) -> tuple[list[tuple[int, bytes]], int]:
        self.require(log)
        check_name("group", group)
        if isinstance(max_records, bool) or not isinstance(max_records, int) or not 1 <= max_records <= MAX_READ:
            raise BadRequest(f"max {max_records!r}: use 1 to {MAX_READ}")
        hwm = self.high_watermark(log)
        start = max(self.cursors.get((log, group), 0), self.meta.get(f"ckpt/{log}/{group}", -1) + 1)
        last = min(hwm, start + max_records - 1)
        got: list[tuple[int, bytes]] = []
        ranges = self.ranges(log)
        for i, current in enumerate(ranges):
            first = max(start, current["start"])
            end = min(last, ranges[i + 1]["start"] - 1 if i + 1 < len(ranges) else last)
            if first > end:
                continue
            got += await self._fetch(log, current["chain"], first, end)
        got.sort()
        if got:
            self.cursors[(log, group)] = got[-1][0] + 1
        elif last >= start:
            self.cursors[(log, group)] = last + 1  # retention took them: move on
        return got[:max_records], hwm

    async def _fetch(self, log: str, chain: list[str], first: int, last: int) -> list[tuple[int, bytes]]:
        if self.name in chain:
            return self.on_read(ReadRecords(log, first, last))
        for member in chain:
            if self.membership.up(member):
                try:
                    return await self.rt.net.call(member, ReadRecords(log, first, last), self.config.timeout)
                except (CallTimeout, Unreachable, RemoteError):
                    continue
        raise Unavailable(f"log {log}: no member of the chain {' -> '.join(chain)} holding {first}..{last} answers")

    async def checkpoint(self, log: str, group: str, offset: int) -> None:
        self.require(log)
        check_name("group", group)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise BadRequest(f"offset {offset!r}: use a whole number >= 0")
        hwm = self.high_watermark(log)
        if offset > hwm:
            raise BadRequest(f"offset {offset} is beyond log {log}'s high watermark {hwm}")
        self.broadcast.broadcast(self.meta.name, MetaEntry(f"ckpt/{log}/{group}", offset, (0, self.name)))

    # ------------------------------------------------------------------ housekeeping
    def tidy(self) -> None:
        """Retention: drop this node's records older than their log's retention."""
        now_ns = self.rt.now_ns()
        for log, held in self.records.items():
            spec = self.meta.get(f"log/{log}")
            if spec is None or not held:
                continue
            horizon = now_ns - int(spec["retention_s"] * 1e9)
            old = [o for o, (put_ns, _) in held.items() if put_ns < horizon]
            if old:
                for offset in old:
                    del held[offset]
                f = self._file(log)
                if f is not None:
                    f.append(aof_records.Trim(max(old) + 1))

    def view(self) -> dict[str, Any]:
        return {key[len("log/"):]: {"retention_s": self.meta.get(key)["retention_s"],
                                    "high_watermark": self.high_watermark(key[len("log/"):]),
                                    "ranges": len(self.ranges(key[len("log/"):])),
                                    "held_here": len(self.records.get(key[len("log/"):], {}))}
                for key in self.meta.keys("log/")}
