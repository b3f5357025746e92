"""NATS JetStream's load client (``lab load nats``): the runner's nats-py client, driven from
a Locust user.

nats-py is asyncio only, and a Locust user is a greenlet, so each process runs one private
asyncio loop in a real OS thread (not a greenlet: Locust has monkey-patched ``threading``),
waiting on the kernel's epoll (gevent's patched selector would not wake it). A user's call
hands its coroutine to that loop and waits for it without blocking the other users: on a
gevent async watcher, which the loop's thread may signal (brokers.md §6).
Outside gevent (a test, a plain thread) the wait is a ``threading.Event``.

The operations are ``lab.peers.nats.driver.NatsClient``'s: put is ``js.publish`` and waits
for the PubAck (no retries), a reliable get is ``fetch(1)`` with the message as the token,
ack is ``ack_sync``, release is ``nak`` and a flush. A definite refusal (``Rejected``,
``Unreachable``) is ``Refused``; anything else (a timeout above all) propagates: unknown.
The run's streams and consumer exist before the users start (``Peer.prepare``).
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any, Callable, Coroutine

from lab.design import Rejected, Unreachable
from lab.design.load import LoadClient, LoadPart, Refused, Targets, target

NODE, PORT = "nats", "client"
GET_WAIT = 0.01  # seconds a get's fetch waits on an empty queue
DEFAULT_TIMEOUT = 1.0  # seconds, when the options carry no ``timeout``


def _gevent_patched() -> bool:
    monkey = sys.modules.get("gevent.monkey")
    return monkey is not None and monkey.is_module_patched("threading")


def _real_thread(target: Callable[[], None]) -> None:
    """Start ``target`` in an OS thread, even where gevent has patched ``threading``."""
    if _gevent_patched():
        from gevent.monkey import get_original

        get_original("_thread", "start_new_thread")(target, ())
    else:
        import threading

        threading.Thread(target=target, name="nats-asyncio", daemon=True).start()


class Loop:
    """One asyncio event loop running in an OS thread of its own."""

    def __init__(self) -> None:
        if _gevent_patched():
            # gevent's selector would wait on the hub of a thread that has none running: the
            # loop waits on the kernel's epoll itself (gevent keeps the original class)
            from gevent.monkey import get_original

            self.loop: asyncio.AbstractEventLoop = asyncio.SelectorEventLoop(
                get_original("selectors", "EpollSelector")())
        else:
            self.loop = asyncio.new_event_loop()
        _real_thread(self._run)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def call(self, make: Callable[[], Coroutine[Any, Any, Any]], timeout: float) -> Any:
        """Run ``make()`` on the loop; its result, or its exception. TimeoutError (outcome
        unknown) if it has not finished within ``timeout`` s: it is cancelled then."""
        box: dict[str, Any] = {}
        done = _Signal()

        def finished(task: asyncio.Task) -> None:
            box["task"] = task
            done.send()  # from the loop's thread

        def schedule() -> None:
            task = box["running"] = self.loop.create_task(make())
            task.add_done_callback(finished)

        self.loop.call_soon_threadsafe(schedule)
        try:
            if not done.wait(timeout):
                self.loop.call_soon_threadsafe(lambda: box["running"].cancel() if "running" in box else None)
                raise TimeoutError(f"nats: no answer within {timeout:g} s")
        finally:
            done.close()
        return box["task"].result()


class _Signal:
    """Set from any thread, waited on by a greenlet (a gevent async watcher) or a thread."""

    def __init__(self) -> None:
        if _gevent_patched():
            import gevent
            from gevent.event import Event

            self.event = Event()
            self.watcher = gevent.get_hub().loop.async_()
            self.watcher.start(self.event.set)
            self.send = self.watcher.send  # thread-safe: wakes the hub, which sets the event
        else:
            import threading

            self.event, self.watcher = threading.Event(), None
            self.send = self.event.set

    def wait(self, timeout: float) -> bool:
        return bool(self.event.wait(timeout))

    def close(self) -> None:
        if self.watcher is not None:
            self.watcher.close()


_LOOP: Loop | None = None


def shared_loop() -> Loop:
    """The process's one loop (made by the first user that needs it)."""
    global _LOOP
    if _LOOP is None:
        _LOOP = Loop()
    return _LOOP


class _Rt:
    """What ``NatsClient`` asks of a runtime (a node name, a clock): nothing more."""

    node = "locust"

    @staticmethod
    def now() -> float:
        import time

        return time.monotonic()


class _Peer:
    """What ``NatsClient`` asks of its peer: the address and the options."""

    def __init__(self, address: tuple[str, int], options: dict):
        self._address, self.options = address, options

    def address(self, rt: Any, port: str | None = None) -> tuple[str, int]:
        return self._address


class NatsLoadClient(LoadClient):
    """The runner's ``NatsClient`` on the shared loop, one per Locust user."""

    def __init__(self, address: tuple[str, int], options: dict, reliable: bool):
        from lab.peers.nats.driver import NatsClient

        self.loop = shared_loop()
        self.timeout = float(options.get("timeout") or DEFAULT_TIMEOUT)
        options = {"timeout": self.timeout, "ack": options.get("ack", "explicit")}
        self.client = NatsClient(_Peer(address, options), _Rt(), reliable)  # type: ignore[arg-type]

    def _call(self, make: Callable[[], Coroutine[Any, Any, Any]], wait: float = 0.0) -> Any:
        try:
            # the client's own timeouts come first; this one only keeps a user from hanging
            return self.loop.call(make, 2 * self.timeout + wait + 1.0)
        except (Rejected, Unreachable) as e:
            raise Refused(str(e)) from e

    def put(self, queue: str, body: bytes) -> None:
        self._call(lambda: self.client.put(queue, body))

    def get(self, queue: str) -> tuple[bytes, Any] | None:
        delivery = self._call(lambda: self.client.get(queue, GET_WAIT), GET_WAIT)
        return None if delivery is None else (delivery.body, delivery if delivery.token is not None else None)

    def ack(self, queue: str, token: Any) -> None:
        self._call(lambda: self.client.ack(token))

    def release(self, queue: str, token: Any) -> None:
        self._call(lambda: self.client.release(token))

    def close(self) -> None:
        try:
            self._call(self.client.close)
        except Exception:  # closing a connection a fault cut
            pass


def make_client(targets: Targets, options: dict, reliable: bool, user: int) -> LoadClient:
    """A client of the ``nats`` node's ``client`` port (one server)."""
    address = target(targets, NODE, PORT, "nats")
    return NatsLoadClient(address, options, reliable)


LOAD = LoadPart(ports=(PORT,), make_client=make_client)
