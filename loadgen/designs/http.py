"""The HTTP designs' shared piece under Locust: one keep-alive geventhttpclient connection
(gevent-safe) and the lab's reading of a status — a 4xx is a refusal (``Refused``), a 5xx
or anything unexpected an unknown outcome, as the runner's HTTP clients say."""

from __future__ import annotations

from typing import Mapping

from geventhttpclient import HTTPClient

from loadgen.client import Refused, split_address


class Http:
    def __init__(self, address: str, timeout: float, wait: float = 0.0):
        self.address, self.timeout, self.wait = address, timeout, wait
        self.client = self._connect()

    def _connect(self) -> HTTPClient:
        host, port = split_address(self.address)
        return HTTPClient(host, port, connection_timeout=self.timeout, network_timeout=self.timeout + self.wait,
                          concurrency=1)

    def call(self, method: str, path: str, body: bytes = b"", headers: Mapping[str, str] | None = None,
             ok_statuses: tuple[int, ...] = ()) -> tuple[int, bytes]:
        """``(status, body)`` of a 2xx (or of a status in ``ok_statuses``); else Refused or RuntimeError."""
        try:
            response = self.client.request(method, path, body=body, headers=dict(headers or {}))
            data = response.read()
        except BaseException as e:
            if not isinstance(e, Exception):
                # interrupted (Locust stopping the user): the one connection is mid-reply and
                # never goes back to the pool, so a later request would wait for it forever
                self.client.close()
                self.client = self._connect()
            raise
        status = response.status_code
        if 200 <= status < 300 or status in ok_statuses:
            return status, data
        if 400 <= status < 500:
            raise Refused(f"{method} {path}: {status} {data[:200]!r}")
        raise RuntimeError(f"{method} {path}: HTTP {status} {data[:200]!r}")

    def close(self) -> None:
        self.client.close()
