"""`primary_backup` under Locust (``lab load primary_backup``): the same HTTP routes as the runner's
client, from a blocking, gevent-safe client (``lab.design.load``'s ``Http``), sent to node a
(the first epoch's primary; this load client does not fail over)."""

from __future__ import annotations

import base64
import itertools
import json
import random

from typing import Any
from urllib.parse import quote

from lab.design.load import Http, LoadClient, LoadPart, Targets

WAIT = 0.01  # seconds a get may wait on the server (a short long poll)


class PrimaryBackupLoadClient(LoadClient):
    def __init__(self, address: str, reliable: bool, timeout: float):
        self.http = Http(address, timeout, WAIT)
        self.reliable = reliable
        self.prefix = f"load{random.getrandbits(40):010x}"
        self.numbers = itertools.count(1)

    def put(self, queue: str, body: bytes) -> None:
        self.http.call("POST", f"/queues/{quote(queue, safe='')}/messages?id={self.prefix}-{next(self.numbers)}",
                       body)

    def get(self, queue: str) -> tuple[bytes, Any] | None:
        status, data = self.http.call("GET", f"/queues/{quote(queue, safe='')}/next?wait={WAIT!r}"
                                             f"&reliable={int(self.reliable)}")
        if status == 204:
            return None
        got = json.loads(data)
        return base64.b64decode(got["body"]), got["receipt"]

    def ack(self, queue: str, token: Any) -> None:
        self.http.call("DELETE", f"/receipts/{quote(token, safe='')}")

    def release(self, queue: str, token: Any) -> None:
        self.http.call("POST", f"/receipts/{quote(token, safe='')}/release")

    def close(self) -> None:
        self.http.close()


def make_client(targets: Targets, options: dict[str, Any], reliable: bool, user: int) -> PrimaryBackupLoadClient:
    return PrimaryBackupLoadClient(targets["a"]["http"], reliable, float(options.get("timeout", 1.0)))


# all the lab reads from this module (lab.design.load): the server node's ports the client
# uses, the main one first; a consumer can hand a message back (releases)
LOAD = LoadPart(ports=("http",), make_client=make_client, releases=True)
