"""A real CassieQ server for tests: ``lab serve cassieq`` as a child process on free
loopback ports (``lab.worlds.live.processes.ServerProcess``, which reads its ready line
``ready cassieq http=<port> admin=<port>``), with clients for its two APIs."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from lab.backends.cassieq.client import AdminClient, CassieqClient, Scheme
from lab.worlds.live.processes import ServerProcess

TIMEOUT = 10.0  # seconds for one request: a busy machine, never a hang


@dataclass
class CassieqServer:
    """One running ``lab serve cassieq`` and the addresses of its APIs."""

    process: ServerProcess

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.process.ports['http']}"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.process.ports['admin']}"

    def admin(self) -> AdminClient:
        return AdminClient(self.admin_url, timeout=TIMEOUT)

    def client(self, account: str, credential: str, scheme: Scheme | None = None, **options) -> CassieqClient:
        return CassieqClient(self.api_url, account, credential, scheme=scheme, timeout=TIMEOUT, **options)

    def http(self) -> httpx.Client:
        """A bare client on the queue API, for requests the queue client would not send."""
        return httpx.Client(base_url=self.api_url, timeout=TIMEOUT)

    def admin_http(self) -> httpx.Client:
        return httpx.Client(base_url=self.admin_url, timeout=TIMEOUT)

    def log(self) -> str:
        return self.process.log()


@contextmanager
def cassieq_server(data_dir: Path, argv: Sequence[str] = ()) -> Iterator[CassieqServer]:
    """Serve CassieQ over ``data_dir`` (SQLite there unless ``argv`` names a ``--store``)
    until the block ends; then stop it with SIGTERM."""
    process = ServerProcess("cassieq", data_dir, list(argv)).start()
    try:
        yield CassieqServer(process)
    finally:
        process.stop()
