"""gevent's loop clock, brought up to date before Locust arms ``--run-time``: every locustfile
of the lab (the lab's own and the minimal one ``lab bench loadgen`` measures it against)
registers ``fresh_clock`` on Locust's ``init`` event.

libev caches the loop's time and moves it only when the loop turns. Nothing turns it while
Locust imports and loads a locustfile, and Locust arms ``--run-time`` right after, relative
to that cached time: on a busy machine, where the imports take longer than the run, the
timer expired at once and a 3 s load ended after its first requests.
"""

from __future__ import annotations

import gevent


def fresh_clock(**_) -> None:
    """Locust's ``init`` listener: the loop's cached time set to now."""
    gevent.get_hub().loop.update_now()
