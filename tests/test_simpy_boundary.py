"""The SimPy boundary (issue 44): the sim world's inlined copies of SimPy's loop and process
(``models.world.run_events``, ``models.driver.Drive``) keep upstream's order.

Each schedule runs twice, once through upstream SimPy (``Environment.run``, ``Process``) and
once through the inlined code, and the two traces of (time, what happened) must match; each
is also checked against the order written out by hand, so a schedule that no longer has the
ties it means to test fails too. pyproject.toml pins the SimPy versions these hold for.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest
import simpy
from simpy.events import URGENT
from simpy.events import Event as SimPyEvent

from lab.design.runtime import Cancelled
from models.awaitables import Await
from models.driver import Drive
from models.tasks import CANCEL
from models.world import run_events

Log = list[tuple[Any, ...]]


def _note(env: simpy.Environment, log: Log, name: str) -> Callable[[SimPyEvent], None]:
    return lambda _: log.append((env.now, name))


def _urgent(env: simpy.Environment, delay: int, log: Log, name: str) -> SimPyEvent:
    """A triggered event processed ``delay`` from now at URGENT priority (as SimPy's own
    ``Initialize`` and ``Interruption`` are, at delay 0)."""
    event = SimPyEvent(env)
    event._ok, event._value = True, None
    event.callbacks.append(_note(env, log, name))
    env.schedule(event, URGENT, delay)
    return event


def _normal(env: simpy.Environment, delay: int, log: Log, name: str) -> SimPyEvent:
    event = env.timeout(delay)
    event.callbacks.append(_note(env, log, name))
    return event


def _schedule(env: simpy.Environment, log: Log) -> SimPyEvent:
    """Ties in time at both priorities, events scheduled from callbacks, a failure that a
    callback defuses; returns the event that ``until`` waits for (it fires at 10)."""
    _normal(env, 0, log, "n0a")
    _normal(env, 0, log, "n0b")
    _urgent(env, 0, log, "u0")  # scheduled last, processed first

    def at_five(_: SimPyEvent) -> None:
        _normal(env, 0, log, "n5 child")  # behind n5b, scheduled before it
        _urgent(env, 0, log, "u5 child")  # ahead of n5b all the same
        _normal(env, 2, log, "n7 child")
        bad = env.event()
        bad.callbacks.append(_note(env, log, "bad"))
        bad.callbacks.append(lambda event: setattr(event, "defused", True))
        bad.fail(KeyError("handled"))

    _normal(env, 5, log, "n5").callbacks.append(at_five)
    _urgent(env, 5, log, "u5")
    _normal(env, 5, log, "n5b")

    until = env.event()
    until.callbacks.append(_note(env, log, "until"))

    def at_ten(_: SimPyEvent) -> None:
        until.succeed()
        _urgent(env, 0, log, "u10 after until")  # ahead of n10b and until, though scheduled after both
        _normal(env, 0, log, "n10 after until")  # behind: the next run's first

    _normal(env, 10, log, "n10").callbacks.append(at_ten)
    _normal(env, 10, log, "n10b")  # scheduled at 0: ahead of until at 10

    # the time limit at 20: an urgent event scheduled before the limit's mark runs, a normal one does not
    _urgent(env, 20, log, "u20")
    _normal(env, 20, log, "n20").callbacks.append(lambda _: _urgent(env, 0, log, "u20 child"))
    _normal(env, 15, log, "n15")
    _normal(env, 30, log, "n30")
    return until


#: the order SimPy processes ``_schedule`` in, run until its event, then to 20, then to the end
EXPECTED = [
    (0, "u0"), (0, "n0a"), (0, "n0b"),
    (5, "u5"), (5, "n5"), (5, "u5 child"), (5, "n5b"), (5, "n5 child"), (5, "bad"),
    (7, "n7 child"),
    (10, "n10"), (10, "u10 after until"), (10, "n10b"), (10, "until"), ("stopped", 10),
    ("stopped", 10),  # an until event processed already: the run does nothing
    (10, "n10 after until"), (15, "n15"), (20, "u20"), ("stopped", 20),
    (20, "n20"), (20, "u20 child"), (30, "n30"), ("stopped", 30),
]


def _upstream(env: simpy.Environment, until: SimPyEvent | None = None, at: int | None = None) -> None:
    env.run(until if at is None else at)


def _phases(loop: Callable[..., None]) -> Log:
    env = simpy.Environment()
    log: Log = []
    until = _schedule(env, log)
    for kwargs in ({"until": until}, {"until": until}, {"at": 20}, {}):
        loop(env, **kwargs)
        log.append(("stopped", env.now))
    return log


def test_run_events_processes_events_in_simpys_order() -> None:
    upstream = _phases(_upstream)
    assert upstream == EXPECTED
    assert _phases(run_events) == upstream


def _failing(env: simpy.Environment, log: Log) -> None:
    _normal(env, 1, log, "before")
    bad = env.event()
    bad.callbacks.append(_note(env, log, "bad"))  # it sees the failure but does not defuse it
    env.timeout(3).callbacks.append(lambda _: bad.fail(ValueError("unhandled", 3)))
    _normal(env, 3, log, "at 3, ahead of the failure")
    _normal(env, 4, log, "later")


def test_an_undefused_failure_stops_the_run_as_upstream() -> None:
    raised: list[BaseException] = []
    logs: list[Log] = []
    for loop in (lambda env: env.run(), run_events):
        env = simpy.Environment()
        log: Log = []
        _failing(env, log)
        with pytest.raises(ValueError) as caught:
            loop(env)
        raised.append(caught.value)
        logs.append(log + [("stopped", env.now)])
    assert logs[0] == [(1, "before"), (3, "at 3, ahead of the failure"), (3, "bad"), ("stopped", 3)]
    assert logs[1] == logs[0]
    for exc in raised:  # a copy of the failure, caused by it, as Environment.step raises
        assert type(exc) is ValueError and exc.args == ("unhandled", 3)
        assert type(exc.__cause__) is ValueError and exc.__cause__ is not exc


def test_an_until_event_never_triggered_is_an_error_as_upstream() -> None:
    for loop in (_upstream, run_events):
        env = simpy.Environment()
        env.timeout(5)
        with pytest.raises(RuntimeError, match="until"):
            loop(env, until=env.event())
        assert env.now == 5


# ---------------------------------------------------------------- Drive against Process


class _Gate:
    paused = False
    resumed: SimPyEvent | None = None


class _Incarnation:
    """The least of ``models.runtime.SimRuntime`` that a drive reads (driver.Incarnation)."""

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.alive = True
        self.state = _Gate()
        self.processes: dict[Any, None] = {}


async def _script(env: simpy.Environment, log: Log, seen: SimPyEvent) -> str:
    """Waits of every kind: a timeout, an event processed already, a failed event, and one
    cut short by an interrupt (a cancel to a drive, ``simpy.Interrupt`` to a process)."""
    log.append((env.now, "start"))
    value = await Await(env.timeout(5, "a"))
    log.append((env.now, "woke", value))
    value = await Await(seen)
    log.append((env.now, "at once", value))
    bad = env.event().fail(KeyError("lost"))
    try:
        await Await(bad)
    except KeyError as e:
        log.append((env.now, "failed", e.args))
    try:
        await Await(env.timeout(9))  # due at 15, as the interrupt: the interrupt, urgent, comes first
        log.append((env.now, "not interrupted"))
    except (Cancelled, simpy.Interrupt):
        log.append((env.now, "interrupted"))
    await Await(env.timeout(3))
    log.append((env.now, "end"))
    return "done"


def _drive_trace(start: Callable[[simpy.Environment, Any], Any], loop: Callable[[simpy.Environment], None]) -> Log:
    env = simpy.Environment()
    log: Log = []
    seen = _normal(env, 0, log, "other at 0")  # scheduled first, processed after the start
    proc: list[Any] = []
    env.timeout(15).callbacks.append(lambda _: proc[0].interrupt(CANCEL))  # due before the script's wait
    env.timeout(1).callbacks.append(lambda _: proc.append(start(env, _script(env, log, seen))))
    _normal(env, 1, log, "other at 1")  # ... and this one after it too

    def joined(event: SimPyEvent) -> None:
        log.append((env.now, "joined", event.value))

    env.timeout(2).callbacks.append(lambda _: proc[0].callbacks.append(joined))
    _normal(env, 18, log, "other at 18")  # scheduled at 0: ahead of the script's last wake
    # scheduled at 16, behind that wake but ahead of the end, which is a normal event of its own
    env.timeout(16).callbacks.append(lambda _: _normal(env, 2, log, "other at 18, later"))
    loop(env)
    return log


def _drive(env: simpy.Environment, coro: Any) -> Drive:
    return Drive(_Incarnation(env), coro)


def _process(env: simpy.Environment, coro: Any) -> simpy.Process:
    return env.process(coro.__await__())  # SimPy's own Process, on the same coroutine


DRIVE_EXPECTED = [
    (0, "other at 0"),
    (1, "start"), (1, "other at 1"),
    (6, "woke", "a"), (6, "at once", None), (6, "failed", ("lost",)),
    (15, "interrupted"),
    (18, "other at 18"), (18, "end"), (18, "other at 18, later"), (18, "joined", "done"),
]


@pytest.mark.parametrize("loop", [simpy.Environment.run, run_events], ids=["env.run", "run_events"])
def test_drive_steps_as_a_simpy_process(loop: Callable[[simpy.Environment], None]) -> None:
    upstream = _drive_trace(_process, simpy.Environment.run)
    assert upstream == DRIVE_EXPECTED
    assert _drive_trace(_drive, loop) == upstream
