"""Redis's load client: redis-py's blocking client on one connection (pure-Python sockets, so
gevent-safe once Locust has patched them), with the runner client's verbs — XADD, XREADGROUP
with a short BLOCK, XACK, a release that makes the entry claimable at once, and XAUTOCLAIM
now and then for entries whose lease ran out.

No retries: redis-py retries a command after a connection error by default, and a retried
XADD whose first reply was cut adds the entry twice.
"""

from __future__ import annotations

import time
from typing import Any

from lab.design.load import LoadClient, LoadPart, Refused, Targets, target

NODE, PORT = "redis", "redis"
GROUP = "lab"
BLOCK_MS = 10  # how long an empty read waits on the server, so a consumer does not spin


class RedisLoadClient(LoadClient):
    def __init__(self, address: tuple[str, int], options: dict[str, Any], reliable: bool, user: int):
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        host, port = address
        timeout = float(options.get("timeout", 1.0))
        self.redis = redis.Redis(host=host, port=port, socket_timeout=timeout + BLOCK_MS / 1000,
                                 socket_connect_timeout=timeout, single_connection_client=True,
                                 retry=Retry(NoBackoff(), 0))
        self.reliable = reliable
        self.me = f"locust-{user}"
        self.claim_ms = int(options.get("claim_ms", 2000))
        self.claimed_at = 0.0
        self.groups: set[str] = set()

    def _call(self, *args: Any) -> Any:
        import redis.exceptions as errors

        try:
            return self.redis.execute_command(*args)
        except errors.ResponseError as e:  # the server refused it (NOGROUP, OOM, LOADING ...)
            raise Refused(str(e)) from e

    def _group(self, queue: str) -> None:
        """The consumer group, created once (a run's queues may not be declared: ``lab load --host``)."""
        if queue not in self.groups:
            try:
                self._call("XGROUP", "CREATE", queue, GROUP, "0", "MKSTREAM")
            except Refused as e:
                if "BUSYGROUP" not in str(e):
                    raise
            self.groups.add(queue)

    def put(self, queue: str, body: bytes) -> None:
        self._call("XADD", queue, "*", "b", body)

    def get(self, queue: str) -> tuple[bytes, Any] | None:
        self._group(queue)
        if self.reliable and time.monotonic() - self.claimed_at >= self.claim_ms / 4000:
            self.claimed_at = time.monotonic()
            reply = self._call("XAUTOCLAIM", queue, GROUP, self.me, self.claim_ms, "0-0", "COUNT", 1)
            for entry_id, fields in (reply[1] if reply else []):
                if fields:
                    return _body(fields), entry_id
        noack = () if self.reliable else ("NOACK",)
        reply = self._call("XREADGROUP", "GROUP", GROUP, self.me, "COUNT", 1, "BLOCK", BLOCK_MS, *noack,
                           "STREAMS", queue, ">")
        if not reply or not reply[0][1]:
            return None
        entry_id, fields = reply[0][1][0]
        return _body(fields), entry_id if self.reliable else None

    def ack(self, queue: str, token: Any) -> None:
        if not self._call("XACK", queue, GROUP, token):
            raise Refused(f"XACK {token!r}: not pending")

    def release(self, queue: str, token: Any) -> None:
        if not self._call("XCLAIM", queue, GROUP, self.me, 0, token, "IDLE", 10 ** 12):
            raise Refused(f"release of {token!r}: not pending")
        self.claimed_at = 0.0  # look for it on the next get

    def close(self) -> None:
        self.redis.close()


def _body(fields: Any) -> bytes:
    return fields[1] if isinstance(fields, list) else fields[b"b"]


def make_client(targets: Targets, options: dict, reliable: bool, user: int) -> LoadClient:
    return RedisLoadClient(target(targets, NODE, PORT, "redis"), options, reliable, user)


LOAD = LoadPart(ports=(PORT,), make_client=make_client)
