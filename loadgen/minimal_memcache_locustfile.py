"""The minimal memcache Locust user that `lab bench loadgen` measures the lab's user against:
plain pymemcache, one key per user, ``set`` then ``get``, each timed by Locust's own
``events.request.measure`` and nothing else (no lab row, no sink).

Run by ``lab bench loadgen`` as ``locust -f <this file> --host 127.0.0.1:PORT ...``; never
imported by the lab (importing locust monkey-patches the importing process).
"""

from __future__ import annotations

import itertools

from locust import User, constant, events, task
from pymemcache.client.base import Client

from loadgen.clock import fresh_clock

PAYLOAD = b"x" * 100  # the lab user's default message size (--lab-size)
_numbers = itertools.count(1)
events.init.add_listener(fresh_clock)  # as the lab's locustfile: the same --run-time for both


class MinimalMemcacheUser(User):
    wait_time = constant(0)

    def on_start(self) -> None:
        host, _, port = (self.host or "").rpartition(":")
        self.memcache = Client((host, int(port)), connect_timeout=5, timeout=5, no_delay=True)
        self.key = f"minimal{next(_numbers)}"

    def on_stop(self) -> None:
        self.memcache.close()

    @task
    def set_then_get(self) -> None:
        measure = self.environment.events.request.measure
        with measure("set", "set", len(PAYLOAD)):
            self.memcache.set(self.key, PAYLOAD, noreply=False)
        with measure("get", "get", len(PAYLOAD)):
            self.memcache.get(self.key)
