"""Cluster metadata: a small replicated key-value store that converges (the "cluster
metadata" Primer takes from plumtree), broadcast through Plumtree and repaired by
anti-entropy.

Each entry carries a version ``(ns, node)``: the highest version wins (last writer wins,
ties broken by node name), so every node that has seen the same entries holds the same
values. Keys under a *max* prefix (a log's high watermark, a group's checkpoint) merge
by the highest value instead: they only move forward, whoever writes them.

What lives here: queues (``queue/<q>``: created on first use), logs (``log/<l>``: the
retention), log ranges (``range/<l>/<start>``: the chain), high watermarks (``hwm/<l>``)
and checkpoints (``ckpt/<l>/<group>``). Listeners hear every change by prefix.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, Callable

from lab.design.runtime import Runtime

MAX_PREFIXES = ("hwm/", "ckpt/")


@dataclass(frozen=True)
class MetaEntry:
    key: str
    value: Any
    version: tuple[int, str]

    @property
    def msg_id(self) -> str:
        return f"m:{self.key}:{_stamp(self)}"


def _is_max(key: str) -> bool:
    return key.startswith(MAX_PREFIXES)


def _stamp(entry: MetaEntry) -> Any:
    """What decides which of two entries of a key wins."""
    return entry.value if _is_max(entry.key) else entry.version


class Metadata:
    name = "meta"

    def __init__(self, rt: Runtime):
        self.rt = rt
        self.entries: dict[str, MetaEntry] = {}
        self.listeners: list[tuple[str, Callable[[MetaEntry], None]]] = []

    def listen(self, prefix: str, callback: Callable[[MetaEntry], None]) -> None:
        self.listeners.append((prefix, callback))

    def get(self, key: str, default: Any = None) -> Any:
        entry = self.entries.get(key)
        return default if entry is None else entry.value

    def keys(self, prefix: str) -> list[str]:
        return sorted(k for k in self.entries if k.startswith(prefix))

    def entry(self, key: str, value: Any) -> MetaEntry:
        """A new entry for ``key`` that wins over what this node has (to broadcast)."""
        version = (self.rt.now_ns(), self.rt.node)
        current = self.entries.get(key)
        if current is not None and not _is_max(key) and current.version >= version:
            version = (current.version[0] + 1, self.rt.node)
        return MetaEntry(key, value, version)

    # ------------------------------------------------------------------ Handler
    def merge(self, msg_id: str, entry: MetaEntry) -> bool:
        current = self.entries.get(entry.key)
        if current is not None and _stamp(current) >= _stamp(entry):
            return False
        self.entries[entry.key] = entry
        for prefix, callback in self.listeners:
            if entry.key.startswith(prefix):
                callback(entry)
        return True

    def seen(self, msg_id: str) -> bool:
        return False  # a graft re-pulls: merge drops what is stale

    def digest(self) -> int:
        return sum(zlib.crc32(f"{key}={_stamp(e)!r}".encode()) for key, e in self.entries.items()) & (2**64 - 1)

    def summary(self) -> dict[str, Any]:
        return {key: _stamp(e) for key, e in self.entries.items()}

    def reconcile(self, summary: dict[str, Any]) -> tuple[list[MetaEntry], list[str]]:
        theirs = dict(summary)
        give = [e for key, e in sorted(self.entries.items()) if key not in theirs or _stamp(e) > theirs[key]]
        want = sorted(key for key, stamp in theirs.items()
                      if key not in self.entries or stamp > _stamp(self.entries[key]))
        return give, want

    def absorb(self, payloads: list[MetaEntry], want: list[str]) -> list[MetaEntry]:
        for entry in payloads:
            self.merge(entry.msg_id, entry)
        return [self.entries[key] for key in want if key in self.entries]
