"""A workload's clients one by one: what a producer or a consumer does where it differs from
the others (the ``clients:`` block of a workload file). Without one, every producer sends its
share of ``rate`` for the whole load and every consumer reads from ``consumer_delay`` on; an
entry, keyed by the client's node name, changes that for one client:

    clients:
      p1: {start: 0.8, stop: 2.0, rate: 300, message_size: 4000, queue: q1}
      c0: {start: 1.5, work_ms: 40, pauses: [[2.0, 1.2]], dies: [[2.6, 0.3]], options: {prefetch: 3}}

- a producer ``p<i>``: ``start`` and ``stop`` (seconds from the start of the run: it sends
  from ``start`` until ``stop`` or the end of the load), ``rate`` (its own messages/s; 0 as
  fast as it can), ``message_size`` and ``queue`` (one of ``q0``.. ``q<queues-1>``);
- a consumer ``c<i>``: ``start`` (instead of ``consumer_delay``), ``work_ms`` (how long it
  works on a message between its get and its ack: a slow consumer keeps reads open),
  ``pauses`` ([at, seconds] pairs: it stops reading for a while, holding what it leased),
  ``dies`` ([at, seconds] pairs: it stops as a crashed process would — the delivery it is
  working on is never acknowledged, its connections close without a word — and a new
  incarnation reads on ``seconds`` later), ``queues`` (the queues it reads, instead of its
  share of them) and ``options`` (its own values of the design's options declared
  ``per_consumer``, such as a prefetch: the run checks them against the design, and refuses
  one that would change what the design promises).

A consumer's death is recorded as an ``abandon`` of what it held (``lab.history.record``;
one without a message between operations): the message must come back, by its lease or by
the closed connection, and be delivered again, or it counts as lost. A design whose promises bring nothing back (no lease, no
hand-back on close) cannot be given ``dies`` with acknowledged reads: ``refuse_deaths``.

The swarm draws these per seed (``lab.experiments.swarm_draw``); a user writes them to give a
load a shape of their own. ``parse_clients`` checks a block against the workload's counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping

from lab.workloads.errors import WorkloadError

PRODUCER_FIELDS = ("start", "stop", "rate", "message_size", "queue")
CONSUMER_FIELDS = ("start", "work_ms", "pauses", "dies", "queues", "options")


@dataclass(frozen=True)
class ClientPlan:
    """One client's departures from the workload's common load (None: the common value)."""

    start: float | None = None
    stop: float | None = None  # producers
    rate: float | None = None  # producers
    message_size: int | None = None  # producers
    queue: str | None = None  # producers
    work_ms: float = 0.0  # consumers
    pauses: tuple[tuple[float, float], ...] = ()  # consumers: (at, seconds)
    dies: tuple[tuple[float, float], ...] = ()  # consumers: (at, seconds until it is back)
    queues: tuple[str, ...] | None = None  # consumers
    options: tuple[tuple[str, Any], ...] = ()  # consumers: its own values of per-consumer design options

    def scaled(self, factor: float) -> "ClientPlan":
        """The plan of a load ``factor`` times as long: its times, not its pace."""
        def times(value: float | None) -> float | None:
            return None if value is None else value * factor

        return replace(self, start=times(self.start), stop=times(self.stop),
                       pauses=tuple((at * factor, seconds * factor) for at, seconds in self.pauses),
                       dies=tuple((at * factor, seconds * factor) for at, seconds in self.dies))


Fail = Callable[[str, str], WorkloadError]


def parse_clients(data: Any, producers: int, consumers: int, queues: int, load_seconds: float | None,
                  fail: Fail) -> dict[str, ClientPlan]:
    """The ``clients:`` block checked against the workload's counts; ``fail(field, problem)``
    makes the error that names the file and the field."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise fail("clients", f"must be a mapping of client names to their settings, got {type(data).__name__}")
    names = [f"q{i}" for i in range(queues)]
    plans = {}
    for name, entry in data.items():
        where = f"clients.{name}"
        role = _role(str(name), producers, consumers)
        if role is None:
            raise fail(where, f"no such client: the workload's are p0..p{producers - 1}"
                       + (f" and c0..c{consumers - 1}" if consumers else " (it has no consumers)"))
        if not isinstance(entry, dict):
            raise fail(where, f"must be a mapping of settings, got {type(entry).__name__}")
        known = PRODUCER_FIELDS if role == "producer" else CONSUMER_FIELDS
        unknown = sorted(set(map(str, entry)) - set(known))
        if unknown:
            raise fail(f"{where}.{unknown[0]}", f"unknown for a {role} (known: {', '.join(known)})")
        plans[str(name)] = _plan(entry, role, names, load_seconds, _prefixed(fail, where))
    if consumers:  # a queue nobody reads would never be drained: its messages would count as lost
        read = {q for i in range(consumers) for q in consumer_queues(plans.get(f"c{i}"), i, consumers, names)}
        unread = [q for q in names if q not in read]
        if unread:
            raise fail("clients", f"no consumer reads {', '.join(unread)}: give one of them its 'queues'")
    return plans


def consumer_queues(plan: ClientPlan | None, number: int, consumers: int, queues: list[str]) -> list[str]:
    """The queues consumer ``number`` of ``consumers`` reads: its plan's, else its share
    (queues i, i+C, ...; with more consumers than queues, they share)."""
    if plan is not None and plan.queues is not None:
        return list(plan.queues)
    return queues[number::consumers] or [queues[number % len(queues)]]


def _prefixed(fail: Fail, where: str) -> Fail:
    return lambda key, problem: fail(f"{where}.{key}", problem)


def _role(name: str, producers: int, consumers: int) -> str | None:
    kind, number = name[:1], name[1:]
    if not number.isdigit() or str(int(number)) != number:
        return None
    if kind == "p" and int(number) < producers:
        return "producer"
    if kind == "c" and int(number) < consumers:
        return "consumer"
    return None


def _plan(entry: Mapping[str, Any], role: str, queues: list[str], end: float | None, fail: Fail) -> ClientPlan:
    def number(key: str, positive: bool = False) -> float | None:
        value = entry.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or value < 0 or (positive and value == 0):
            raise fail(key, f"must be a number {'>' if positive else '>='} 0, got {value!r}")
        return float(value)

    def queue(value: Any, key: str) -> str:
        if value not in queues:
            raise fail(key, f"must be one of the workload's queues ({', '.join(queues)}), got {value!r}")
        return str(value)

    start = number("start")
    if start is not None and end is not None and start >= end:
        raise fail("start", f"{start:g} s is at or past the end of the load ({end:g} s)")
    if role == "producer":
        stop = number("stop", positive=True)
        if stop is not None and start is not None and stop <= start:
            raise fail("stop", f"{stop:g} s is not after its start ({start:g} s)")
        size = entry.get("message_size")
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise fail("message_size", f"must be a whole number >= 1, got {size!r}")
        return ClientPlan(start=start, stop=stop, rate=number("rate"), message_size=size,
                          queue=None if entry.get("queue") is None else queue(entry["queue"], "queue"))
    read = entry.get("queues")
    if read is not None and (not isinstance(read, list) or not read):
        raise fail("queues", f"must be a non-empty list of queue names, got {read!r}")
    own = entry.get("options") or {}
    if not isinstance(own, dict) or not all(isinstance(k, str) for k in own):
        raise fail("options", f"must be a mapping of the design's option names to values, got {own!r}")
    return ClientPlan(start=start, work_ms=number("work_ms") or 0.0, pauses=_spans(entry, "pauses", fail),
                      dies=_spans(entry, "dies", fail),
                      queues=None if read is None else tuple(queue(q, "queues") for q in read),
                      options=tuple(sorted(own.items())))


def _spans(entry: Mapping[str, Any], key: str, fail: Fail) -> tuple[tuple[float, float], ...]:
    """A consumer's ``[at, seconds]`` pairs (``pauses``, ``dies``), checked and in order."""
    spans = entry.get(key) or []
    if not isinstance(spans, list) or not all(isinstance(p, list) and len(p) == 2 for p in spans):
        raise fail(key, f"must be a list of [at, seconds] pairs, got {spans!r}")
    checked = []
    for at, seconds in spans:
        if not all(not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and v >= 0
                   for v in (at, seconds)):
            raise fail(key, f"[at, seconds] must be numbers >= 0, got {[at, seconds]!r}")
        checked.append((float(at), float(seconds)))
    return tuple(sorted(checked))


def refuse_deaths(plans: Mapping[str, ClientPlan], reliable: bool, brings_back: bool, by: str) -> str | None:
    """Why a load whose consumers die (``dies``) cannot run against a design, or None: with
    acknowledged reads, a dead consumer's delivery must come back for the run to say
    anything, and ``by`` (the promises' holder) promises no way back (``brings_back``)."""
    dying = sorted(name for name, plan in plans.items() if plan.dies)
    if dying and reliable and not brings_back:
        return (f"clients {', '.join(dying)} die holding reads, but {by} hands an unacknowledged delivery back "
                "neither after a lease nor when its connection closes: what a dead consumer held would stay "
                "with it (give the design an option set that leases, or drop `dies`)")
    return None
