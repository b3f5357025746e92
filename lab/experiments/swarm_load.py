"""The swarm's load draw: each seed's producers, consumers and client settings, so that the
states a bug needs — a backlog drained by several consumers at once, a consumer that starts
late or falls behind, many reads open at a crash, clients that give up sooner or later —
are there in some seeds when a fault strikes (swarm testing: Groce et al., ISSTA 2012).

``draw_load`` is a pure function of the seed and the base workload: the counts, the rate
and its arrivals, message sizes, queues, the load's length and warm-up, the clients'
timeout, and a ``clients:`` block (``lab.workloads.clients``) with some producers that start
late or stop early at a rate and size of their own, and some consumers that start late,
work slowly on each message, pause while holding their reads, or read queues of their own
(every queue is still read by some consumer). ``Shape`` is what the fault draw times faults
against: when late consumers begin, when slow ones read.

``draw_deaths`` is drawn after the faults, from a stream of its own (so that no other draw
of a seed moves): in some seeds a consumer that works a while on each message dies, now and
then while a server's crash or restart strikes the read it holds, and comes back as a new
client — the state in which a recovery must hand back reads nobody will acknowledge.
``draw_own_options``, from a stream of its own too, gives some consumers their own values of
the design's per-consumer options (a prefetch): a small fetch takes part of what a large one
held and handed back.
"""

from __future__ import annotations

import copy
import math
import random
from dataclasses import dataclass
from typing import Any, Mapping

from lab.workloads.clients import consumer_queues

MAX_PRODUCERS, MAX_CONSUMERS, MAX_QUEUES = 4, 4, 3
RATE = (100, 1500)  # messages/s in all, drawn log-uniform: a run's cost grows with its messages
SIZE = (16, 4096)  # bytes, log-uniform: past a design's small-memory thresholds sometimes
DURATION = (2.5, 4.5)  # seconds of load after the warm-up
TIMEOUT = (0.3, 3.0)  # seconds: shorter and longer than the designs' default of 1 s
DEATH_P = 0.3  # the chance that a seed with consumers has one that dies
DEATH_WORK_MS = (20, 300)  # how long a dying consumer works on each message: it dies holding one
DEATH_DOWN = (0.02, 1.5)  # seconds until the dead consumer is back as a new client
STRUCK_P = 0.6  # the chance that a death is timed inside a restarting fault's strike on the read held
OWN_P = 0.5  # the chance that a consumer has its own values of the design's per-consumer options


@dataclass(frozen=True)
class Shape:
    """What the load does when, for timing faults against it (seconds from the run's start)."""

    end: float  # when the producers stop
    late_starts: tuple[float, ...] = ()  # consumers that begin after the others: a backlog waits
    slow_readers: tuple[float, ...] = ()  # when each slow consumer (reads held open) begins
    timeout: float = 1.0  # the clients' reply timeout


def _log_uniform(rng: random.Random, low: float, high: float) -> float:
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def draw_load(rng: random.Random, base: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with the load fields and the ``clients:`` block drawn from ``rng``."""
    w = copy.deepcopy(dict(base))
    w.pop("messages", None)
    w.pop("consumer_delay", None)  # the consumers' starts are drawn one by one
    producers = w["producers"] = rng.choice((1, 1, 2, 2, 3, MAX_PRODUCERS))
    consumers = w["consumers"] = rng.choice((0, 1, 1, 2, 2, 3, MAX_CONSUMERS))  # 0: the drain reads it all
    queues = w["queues"] = rng.choice((1, 1, 1, 2, MAX_QUEUES))
    w["rate"] = round(_log_uniform(rng, *RATE))
    w["arrivals"] = "poisson" if rng.random() < 0.25 else "constant"  # open loop: many puts in flight
    w["message_size"] = round(_log_uniform(rng, *SIZE))
    w["duration"] = round(rng.uniform(*DURATION), 2)
    w["warmup"] = round(rng.uniform(0.2, 0.8), 2)
    if rng.random() < 0.5:
        w["timeout"] = round(_log_uniform(rng, *TIMEOUT), 2)
    else:
        w.pop("timeout", None)
    end = w["warmup"] + w["duration"]
    names = [f"q{i}" for i in range(queues)]
    clients: dict[str, dict[str, Any]] = {}
    for i in range(producers):
        plan: dict[str, Any] = {}
        if rng.random() < 0.3:
            plan["start"] = round(rng.uniform(0, 0.4 * end), 3)
        if rng.random() < 0.25:
            plan["stop"] = round(rng.uniform(plan.get("start", 0) + 0.3, 0.9 * end), 3)
        if rng.random() < 0.2:
            plan["rate"] = round(_log_uniform(rng, 20, RATE[1] / 2))
        if rng.random() < 0.2:
            plan["message_size"] = round(_log_uniform(rng, *SIZE))
        if queues > 1 and rng.random() < 0.3:
            plan["queue"] = rng.choice(names)
        if plan:
            clients[f"p{i}"] = plan
    read: set[str] = set()
    for i in range(consumers):
        plan = {}
        if rng.random() < 0.4:
            plan["start"] = round(rng.uniform(0, 0.6 * end), 3)
        if rng.random() < 0.3:
            plan["work_ms"] = round(_log_uniform(rng, 1, 300), 1)
        if rng.random() < 0.3:
            pauses = sorted(round(rng.uniform(0, end), 3) for _ in range(rng.randint(1, 2)))
            plan["pauses"] = [[at, round(_log_uniform(rng, 0.1, 2.5), 3)] for at in pauses]
        if queues > 1 and rng.random() < 0.3:
            plan["queues"] = sorted(rng.sample(names, rng.randint(1, queues)))
        read |= set(plan.get("queues") or consumer_queues(None, i, consumers, names))
        if plan:
            clients[f"c{i}"] = plan
    unread = [q for q in names if q not in read]
    if consumers and unread:  # every queue has a reader: c0 takes the ones nobody else reads
        c0 = clients.setdefault("c0", {})
        c0["queues"] = sorted(set(c0.get("queues") or consumer_queues(None, 0, consumers, names)) | set(unread))
    if clients:
        w["clients"] = clients
    else:
        w.pop("clients", None)
    return w


def shape_of(workload: Mapping[str, Any], end: float) -> Shape:
    """When ``workload``'s load (its producers stopping at ``end``) does what the fault draw
    can time a fault against."""
    clients = workload.get("clients") or {}
    consumers = [clients.get(f"c{i}", {}) for i in range(workload.get("consumers", 1))]
    return Shape(end, tuple(c["start"] for c in consumers if c.get("start")),
                 tuple(c.get("start", 0.0) for c in consumers if c.get("work_ms")),
                 workload.get("timeout") or 1.0)


def draw_deaths(rng: random.Random, workload: dict[str, Any], strikes: list[tuple[float, str]],
                window: tuple[float, float]) -> list[str]:
    """Maybe a consumer of ``workload`` that dies (its plan's ``dies``, set in place), and a
    note per death: at random in ``window``, or — given ``strikes``, (when, what) of each
    restarting fault — inside the work on the read it held when one struck."""
    consumers = workload.get("consumers", 0)
    if not consumers or rng.random() >= DEATH_P:
        return []
    name = f"c{rng.randrange(consumers)}"
    plan = workload.setdefault("clients", {}).setdefault(name, {})
    if plan.get("work_ms", 0) < DEATH_WORK_MS[0]:  # so that it is holding a read when it dies
        plan["work_ms"] = round(_log_uniform(rng, *DEATH_WORK_MS), 1)
    work = plan["work_ms"] / 1000
    deaths, notes = [], []
    for _ in range(rng.randint(1, 2)):
        down = round(_log_uniform(rng, *DEATH_DOWN), 3)
        if strikes and rng.random() < STRUCK_P:
            at, what = rng.choice(strikes)
            when = round(at + rng.uniform(0, work), 3)
            notes.append(f"{name} dies @{when:g}s, back {down:g} s later, holding the read {what} struck")
        else:
            when = round(rng.uniform(*window), 3)
            notes.append(f"{name} dies @{when:g}s, back {down:g} s later")
        deaths.append([when, down])
    plan["dies"] = sorted(deaths)
    return notes


def draw_own_options(rng: random.Random, workload: dict[str, Any], values: Mapping[str, tuple[Any, ...]]) -> None:
    """Some consumers of ``workload`` with their own values (their plan's ``options``, set in
    place) of the per-consumer options ``values`` names, each drawn from its values."""
    for i in range(workload.get("consumers", 0)):
        if rng.random() < OWN_P:
            own = {name: rng.choice(choices) for name, choices in values.items()}
            workload.setdefault("clients", {}).setdefault(f"c{i}", {})["options"] = own
