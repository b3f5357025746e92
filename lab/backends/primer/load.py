"""Primer under Locust: its client API over HTTP (``docs/primer.md``), with geventhttpclient
(gevent-safe, keep-alive), each Locust user on one node of the cluster (``user % nodes``),
so a load spreads over every node as a user's clients would.

put: ``POST /queues/q/messages``; get: ``GET /queues/q/messages?wait=…&mode=…`` (at-least-once
with reliable reads: a lease and a receipt; at-most-once otherwise); ack and release:
``POST …/{id}/ack|release {"receipt"}``. A 4xx is a refusal; a 5xx (503: fewer than W
members up, or a replica that did not answer), a timeout or a cut connection leaves the
outcome unknown, as the runner's Primer client says.
"""

from __future__ import annotations

import base64
import json
from typing import Any
from urllib.parse import quote

from lab.design.load import Http, LoadClient, LoadPart, Targets

WAIT = 0.01  # seconds a get may wait for a message (the server's long poll), so consumers do not spin


class PrimerLoadClient(LoadClient):
    def __init__(self, address: str, reliable: bool, timeout: float):
        self.http = Http(address, timeout, WAIT)
        self.mode = "at-least-once" if reliable else "at-most-once"

    def _call(self, method: str, path: str, body: bytes = b"", content_type: str = "application/octet-stream"):
        return self.http.call(method, path, body, {"Content-Type": content_type})

    def put(self, queue: str, body: bytes) -> None:
        self._call("POST", f"/queues/{quote(queue, safe='')}/messages", body)

    def get(self, queue: str) -> tuple[bytes, Any] | None:
        status, data = self._call("GET", f"/queues/{quote(queue, safe='')}/messages?wait={WAIT:g}&mode={self.mode}")
        if status == 204:
            return None
        got = json.loads(data)
        token = (got["id"], got["receipt"]) if got.get("receipt") else None
        return base64.b64decode(got["payload"]), token

    def _settle(self, queue: str, token: Any, verb: str) -> None:
        message_id, receipt = token
        self._call("POST", f"/queues/{quote(queue, safe='')}/messages/{quote(message_id, safe='')}/{verb}",
                   json.dumps({"receipt": receipt}).encode(), "application/json")

    def ack(self, queue: str, token: Any) -> None:
        self._settle(queue, token, "ack")

    def release(self, queue: str, token: Any) -> None:
        self._settle(queue, token, "release")

    def close(self) -> None:
        self.http.close()


def make_client(targets: Targets, options: dict[str, Any], reliable: bool, user: int) -> PrimerLoadClient:
    nodes = sorted(targets)
    node = nodes[user % len(nodes)]
    return PrimerLoadClient(targets[node]["http"], reliable, float(options.get("timeout", 1.0)))


LOAD = LoadPart(ports=("http",), make_client=make_client)
