"""beanstalkd's load client: greenstalk (pure Python, so gevent-safe once Locust has patched
``socket``) on one connection to the ``beanstalkd`` node's port, with the runner client's
verbs (``lab.peers.beanstalkd.driver``).

put is ``use q`` (once per tube) and ``put 0 0 TTR n``; a reliable get is
``reserve-with-timeout 0`` on the watched tube (the token is the job id), its ack ``delete``
and its release ``release id 0 0`` (back at the head); a plain get deletes the job before
handing it out (token None). The server counts a reserve's wait in whole seconds, so an empty
get returns at once and the client pauses ``EMPTY_WAIT`` itself, as a short server-side wait
would.

Outcomes: a server refusal (``NOT_FOUND``, ``DRAINING``, ``JOB_TOO_BIG`` ...) is ``Refused``;
a cut connection, a timeout or ``BURIED`` (kept, but out of the ready heap) leaves the outcome
unknown and propagates. Any failure but a refusal closes the connection — greenstalk would
read a late reply as the next one's — and the next call opens another, which the server
takes as the old one's end: it releases what the old one had reserved.
"""

from __future__ import annotations

import socket
import time
from typing import Any

import greenstalk

from lab.design.load import LoadClient, LoadPart, Refused, Targets, target

NODE, PORT = "beanstalkd", "beanstalkd"
DEFAULT_TIMEOUT = 1.0  # seconds, when the options carry no ``timeout``
DEFAULT_TTR = 2  # seconds, when the options carry no ``ttr``
EMPTY_WAIT = 0.005  # seconds an empty get pauses (beanstalkd's own wait is whole seconds)
PRIORITY = 0


class BeanstalkdLoadClient(LoadClient):
    """One greenstalk connection, opened on first use and again after a failure."""

    def __init__(self, address: tuple[str, int], reliable: bool, timeout: float, ttr: int):
        self.address, self.reliable, self.timeout, self.ttr = address, reliable, timeout, ttr
        self.conn: greenstalk.Client[bytes] | None = None
        self.used = self.watched = "default"

    def _client(self) -> "greenstalk.Client[bytes]":
        if self.conn is None:
            sock = socket.create_connection(self.address, timeout=self.timeout)
            self.conn = greenstalk.Client(sock, encoding=None)
            self.used = self.watched = "default"
        return self.conn

    def _call(self, what: str, action: Any) -> Any:
        """``action(client)``; a refusal as Refused, anything else closes the connection."""
        try:
            return action(self._client())
        except (greenstalk.TimedOutError, greenstalk.DeadlineSoonError):
            raise
        except greenstalk.BuriedError:
            self.close()
            raise
        except greenstalk.BeanstalkdError as e:
            raise Refused(f"{what}: {type(e).__name__}") from e
        except BaseException:
            self.close()
            raise

    def _use(self, conn: "greenstalk.Client[bytes]", queue: str) -> None:
        if self.used != queue:
            conn.use(queue)
            self.used = queue

    def _watch(self, conn: "greenstalk.Client[bytes]", queue: str) -> None:
        if self.watched != queue:
            conn.watch(queue)
            conn.ignore(self.watched)
            self.watched = queue

    def put(self, queue: str, body: bytes) -> None:
        def put(conn: "greenstalk.Client[bytes]") -> None:
            self._use(conn, queue)
            conn.put(body, priority=PRIORITY, ttr=self.ttr)

        self._call(f"put {queue}", put)

    def get(self, queue: str) -> tuple[bytes, Any] | None:
        def reserve(conn: "greenstalk.Client[bytes]") -> "greenstalk.Job[bytes]":
            self._watch(conn, queue)
            return conn.reserve(timeout=0)

        try:
            job = self._call(f"reserve {queue}", reserve)
        except (greenstalk.TimedOutError, greenstalk.DeadlineSoonError):
            time.sleep(EMPTY_WAIT)  # gevent's sleep under Locust
            return None
        if self.reliable:
            return job.body, job.id
        self._call(f"delete {job.id}", lambda conn: conn.delete(job.id))  # taken for good before the hand-out
        return job.body, None

    def ack(self, queue: str, token: Any) -> None:
        self._call(f"delete {token}", lambda conn: conn.delete(token))

    def release(self, queue: str, token: Any) -> None:
        self._call(f"release {token}", lambda conn: conn.release(greenstalk.Job(token, b""), priority=PRIORITY))

    def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            try:
                conn.close()
            except OSError:
                pass


def make_client(targets: Targets, options: dict, reliable: bool, user: int) -> LoadClient:
    """A client of the ``beanstalkd`` node's port (one server)."""
    address = target(targets, NODE, PORT, "beanstalkd")
    timeout = float(options.get("timeout") or DEFAULT_TIMEOUT)
    ttr = int(options.get("ttr") or DEFAULT_TTR)
    return BeanstalkdLoadClient(address, reliable, timeout, ttr)


LOAD = LoadPart(ports=(PORT,), make_client=make_client)
