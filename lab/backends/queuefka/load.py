"""Queuefka under Locust: its HTTP front (``lab/backends/queuefka/wire/http.py``), as the
runner's client uses it — producers append records to a topic; consumers read in the
consumer group ``lab``, up to ``prefetch`` records a fetch handed out one by one, and an
ack commits the group's offset up to the record after it (reliable: at-least-once; with
plain gets the fetch itself commits: at-most-once). A topic that does not exist yet is an
empty get."""

from __future__ import annotations

import base64
import json
from collections import deque
from typing import Any
from urllib.parse import quote

from lab.backends.queuefka.driver import GROUP, SERVER
from lab.design.load import Http, LoadClient, LoadPart, Refused, Targets

WAIT = 0.01  # seconds a fetch may wait for records (the server's long poll)


class QueuefkaLoadClient(LoadClient):
    def __init__(self, address: str, reliable: bool, timeout: float, prefetch: int):
        self.http = Http(address, timeout, WAIT)
        self.mode = "at-least-once" if reliable else "at-most-once"
        self.prefetch = prefetch
        self.buffered_records: dict[str, deque[tuple[bytes, int]]] = {}

    def put(self, queue: str, body: bytes) -> None:
        self.http.call("POST", f"/topics/{quote(queue, safe='')}/messages", body)

    def get(self, queue: str) -> tuple[bytes, Any] | None:
        buffered = self.buffered_records.get(queue)
        if not buffered:
            status, data = self.http.call("GET", f"/topics/{quote(queue, safe='')}/messages?group={GROUP}"
                                                 f"&max={self.prefetch}&wait={WAIT!r}&mode={self.mode}",
                                          ok_statuses=(404,))
            if status == 404:  # no such topic yet
                return None
            reply = json.loads(data)
            records = [(r["address"], base64.b64decode(r["payload"])) for r in reply["records"]]
            if not records:
                return None
            tokens = [address for address, _ in records[1:]] + [reply["next"]]
            buffered = self.buffered_records[queue] = deque(zip((p for _, p in records), tokens))
        return buffered.popleft()

    def buffered(self, queue: str) -> int:
        """Records fetched and not yet handed out (the users hand them out before they stop)."""
        return len(self.buffered_records.get(queue, ()))

    def ack(self, queue: str, token: Any) -> None:
        self.http.call("POST", f"/topics/{quote(queue, safe='')}/groups/{GROUP}/commit",
                       b'{"address": %d}' % token, {"Content-Type": "application/json"})

    def release(self, queue: str, token: Any) -> None:
        """A log has no release (``LOAD.releases``): ``lab load`` does not ask for one."""
        raise Refused(f"release {queue}: a log has no release")

    def close(self) -> None:
        self.http.close()


def make_client(targets: Targets, options: dict[str, Any], reliable: bool, user: int) -> QueuefkaLoadClient:
    return QueuefkaLoadClient(targets[SERVER]["http"], reliable, float(options.get("timeout", 1.0)),
                              int(options.get("prefetch", 100)))


# a log has no release: a record fetched and not committed comes back to the group only when
# its session ends (the connection closes, or it idles past the session timeout), so a load
# with releases is refused rather than timed as one
LOAD = LoadPart(ports=("http",), make_client=make_client, releases=False)
