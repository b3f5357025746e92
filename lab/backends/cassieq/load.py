"""CassieQ under Locust: its queue API with signed requests (``Authorization: Signed`` and
the request time, ``lab.backends.cassieq.core.auth.sign_request``), each Locust user on one
API node (``user % nodes``), as the runner's client uses the API otherwise: the account
``lab`` comes from the admin API (created if missing), a queue is created on first use, a
get leases a message for ``invisibility`` seconds, an ack deletes it with its pop receipt,
a release sets its invisibility to 0; with plain gets the client acks at once."""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import quote

from lab.backends.cassieq.core.auth import sign_request
from lab.backends.cassieq.driver import ACCOUNT
from lab.design.load import Http, LoadClient, LoadPart, Targets

ADMIN = "/admin/api/v1/accounts"
BASE = f"/api/v1/accounts/{ACCOUNT}/queues"


class CassieqLoadClient(LoadClient):
    def __init__(self, api: str, admin: str, reliable: bool, timeout: float, invisibility: int, bucket_size: int):
        self.http = Http(api, timeout)
        self.admin = Http(admin, timeout)
        self.reliable, self.invisibility, self.bucket_size = reliable, invisibility, bucket_size
        self.key: str | None = None
        self.queues: set[str] = set()

    def _key(self) -> str:
        if self.key is None:
            status, body = self.admin.call("GET", f"{ADMIN}/{ACCOUNT}", ok_statuses=(404,))
            if status == 404:
                status, body = self.admin.call("POST", ADMIN, json.dumps(ACCOUNT).encode(),
                                               {"Content-Type": "application/json"}, ok_statuses=(409,))
                if status == 409:  # another user made it first
                    status, body = self.admin.call("GET", f"{ADMIN}/{ACCOUNT}")
            self.key = json.loads(body)["keys"]["primary"]
        return self.key

    def _api(self, method: str, path: str, body: bytes = b"", content_type: str = "text/plain",
             ok_statuses: tuple[int, ...] = ()) -> tuple[int, bytes]:
        target = BASE + path
        headers = sign_request(ACCOUNT, self._key(), method, target, int(time.time() * 1000))
        headers["Content-Type"] = content_type
        return self.http.call(method, target, body, headers, ok_statuses)

    def _queue(self, queue: str) -> str:
        path = "/" + quote(queue, safe="")
        if queue not in self.queues:
            options = {"queueName": queue, "bucketSize": self.bucket_size}
            self._api("POST", "", json.dumps(options).encode(), "application/json")
            self.queues.add(queue)
        return path

    def put(self, queue: str, body: bytes) -> None:
        self._api("POST", f"{self._queue(queue)}/messages", body)

    def get(self, queue: str) -> tuple[bytes, Any] | None:
        status, data = self._api("GET", f"{self._queue(queue)}/messages/next?invisibilityTimeSeconds={self.invisibility}")
        if status == 204:
            return None
        got = json.loads(data)
        body, receipt = got["message"].encode(), got["popReceipt"]
        if not self.reliable:
            self.ack(queue, receipt)
            return body, None
        return body, receipt

    def ack(self, queue: str, token: Any) -> None:
        self._api("DELETE", f"/{quote(queue, safe='')}/messages?popReceipt={quote(token, safe='')}")

    def release(self, queue: str, token: Any) -> None:
        self._api("PUT", f"/{quote(queue, safe='')}/messages?popReceipt={quote(token, safe='')}",
                  json.dumps({"newInvisibilitySeconds": 0}).encode(), "application/json")

    def close(self) -> None:
        self.http.close()
        self.admin.close()


def make_client(targets: Targets, options: dict[str, Any], reliable: bool, user: int) -> CassieqLoadClient:
    nodes = sorted(n for n in targets if targets[n].get("http"))
    node = nodes[user % len(nodes)]
    return CassieqLoadClient(targets[node]["http"], targets[nodes[0]]["admin"], reliable,
                             float(options.get("timeout", 1.0)), int(options.get("invisibility", 5)),
                             int(options.get("bucket_size", 20)))


# the API's port first; the admin port is where a client makes the account and reads its key
LOAD = LoadPart(ports=("http", "admin"), make_client=make_client)
