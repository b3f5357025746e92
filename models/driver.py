"""The driver: one coroutine of a simulated node run on SimPy events, behind the node's pause gate.

A ``Drive`` is what a SimPy ``Process`` running a driver generator used to be, folded into
one object that SimPy's event loop calls back: the coroutine yields an event (an
``Await``), the driver appends itself to that event's callbacks, and when the event fires
sends its value (or throws its failure) into the coroutine. It is an event itself, as a
process is: it fires with the coroutine's result, so a task can be awaited and a run can
stop at its main's end. Dropping the process and the generator between SimPy and the
coroutine halves the Python calls per resumption; everything else keeps SimPy's order:

- the first step runs at an urgent event scheduled at creation, as a process's
  ``Initialize`` (``SimRuntime.start`` has run the first step already, so there it only
  begins waiting);
- an interrupt (a cancel, a crash) is an urgent event too, as SimPy's ``Interruption``;
- the end is scheduled as a normal event, as a process's.

Interrupts and the pause gate behave as they did in the generator: after any event
fires, a paused node's coroutine waits for the node's ``resumed`` event; a cancel raises
``Cancelled`` in the coroutine (after the gate), a crash closes it where it is.

``Drive`` and ``_Urgent`` copy simpy.events' Process, Initialize and Interruption onto their
private fields, so pyproject.toml pins SimPy to the releases they were checked against (4.1.0
to 4.1.2; tests/test_simpy_boundary.py).
"""

from __future__ import annotations

from heapq import heappush
from typing import Any, Coroutine, Protocol

import simpy

from simpy.core import URGENT
from simpy.events import NORMAL, PENDING
from simpy.events import Event as SimPyEvent

from lab.design.runtime import Cancelled
from models.tasks import CANCELLED, CRASH, CRASHED


class Gate(Protocol):
    """A node's pause gate, as ``models.runtime.NodeState`` holds it."""

    paused: bool
    resumed: SimPyEvent | None


class Incarnation(Protocol):
    """What a drive reads of its node incarnation (``models.runtime.SimRuntime``)."""

    env: simpy.Environment
    alive: bool
    processes: dict[Any, None]  # its live drives

    @property
    def state(self) -> Gate: ...  # read-only here: the node's own state type fills it in


_START, _WAIT, _GATE = 0, 1, 2  # where a drive stands: not begun, waiting on an event, at the pause gate


class _Urgent:
    """An urgent entry on the event heap that calls ``callback`` (a drive's start, an interrupt)."""

    # Mirrors simpy.events.Initialize and Interruption (SimPy 4.1.2): a triggered event pushed
    # at URGENT with the environment's next eid, as Environment.schedule does, so a start or an
    # interrupt runs before the normal events due at the same time. An Interruption is a failed,
    # defused event; this one succeeds, its cause in _value, as the drive alone reads it.

    __slots__ = ("callbacks", "_ok", "_value")

    def __init__(self, env: Any, callback: Any, value: Any = None):
        self.callbacks: list | None = [callback]
        self._ok = True
        self._value = value
        heappush(env._queue, (env._now, URGENT, next(env._eid), self))


class Drive(SimPyEvent):
    """A coroutine of node incarnation ``rt``, driven by the events it awaits; ``first``:
    the event it already waits on (its first step ran inside the caller)."""

    def __init__(self, rt: Incarnation, coro: Coroutine, first: SimPyEvent | None = None):
        # Mirrors simpy.events.Process.__init__ (SimPy 4.1.2): PENDING value while alive, and
        # the first step at an urgent event, Initialize's place
        env = rt.env
        self.env = env
        self.callbacks = []
        self._value = PENDING
        self.rt = rt
        self.coro = coro
        self.first = first
        self.mode = _START
        self.held: tuple[Any, BaseException | None] = (None, None)  # what waits at the gate to be sent
        self.resume = self._resume  # one bound method: appended to and removed from callbacks
        rt.processes[self] = None
        self._target: Any = _Urgent(env, self.resume)

    @property
    def is_alive(self) -> bool:
        return self._value is PENDING

    def interrupt(self, cause: Any) -> None:
        """Cancel (``CANCEL``) or crash (``CRASH``) the coroutine, at an urgent event now."""
        # Interruption.__init__'s checks (simpy.events, SimPy 4.1.2), with its messages
        if self._value is not PENDING:
            raise RuntimeError(f"{self} has terminated and cannot be interrupted.")
        if self is self.env._active_proc:
            raise RuntimeError("A process is not allowed to interrupt itself.")
        _Urgent(self.env, self._interrupted, cause)

    def _interrupted(self, entry: _Urgent) -> None:
        # Mirrors Interruption._interrupt (SimPy 4.1.2): a drive that ended meanwhile ignores
        # it; else it stops waiting on its target and steps with the interrupt instead
        if self._value is not PENDING:
            return
        self._target.callbacks.remove(self.resume)
        self._step(None, entry._value)

    def _resume(self, event: Any) -> None:
        self._step(event, None)

    def _step(self, event: Any, interrupt: Any) -> None:
        # Process._resume marks the process active (env.active_process) while it steps
        env = self.env
        env._active_proc = self  # type: ignore[assignment]  # a drive stands in for the Process SimPy's stubs name
        try:
            self._advance(event, interrupt)
        finally:
            env._active_proc = None

    def _advance(self, event: Any, interrupt: Any) -> None:
        value: Any = None
        error: BaseException | None = None
        if interrupt is not None:
            if interrupt is CRASH:
                return self._crashed()
            error = Cancelled()
        elif self.mode == _WAIT:
            value, error = self._outcome(event)
            if error is None and not self.rt.alive:  # the event won a race with the crash interrupt
                return self._crashed()
        elif self.mode == _GATE:
            value, error = self.held
        else:  # _START
            first = self.first
            if first is not None:
                self.first = None
                if self._wait(first):
                    return
                value, error = self._outcome(first)
                if error is None and not self.rt.alive:
                    return self._crashed()
        node = self.rt.state
        coro = self.coro
        while True:
            if node.paused:  # the pause gate: nothing of a paused node resumes
                self.held = (value, error)
                self.mode = _GATE
                resumed = node.resumed
                assert resumed is not None  # set with paused (SimWorld.pause)
                self._target = resumed
                resumed.callbacks.append(self.resume)
                return
            try:
                if error is None:
                    event = coro.send(value)
                else:
                    event, error = coro.throw(error), None
            except StopIteration as stop:
                return self._end(True, stop.value)
            except Cancelled:
                return self._end(True, CANCELLED)
            except BaseException as e:  # the coroutine failed: so does the task (and the run, unless awaited)
                return self._end(False, e)
            if self._wait(event):
                return
            value, error = self._outcome(event)  # processed already: at once, as SimPy does
            if error is None and not self.rt.alive:
                return self._crashed()

    def _wait(self, event: Any) -> bool:
        """Wait on ``event``: False if it has been processed already (its value is ready)."""
        # Process._resume's (SimPy 4.1.2): callbacks None means processed; else resume on it
        try:
            callbacks = event.callbacks
        except AttributeError:
            raise RuntimeError(f"a simulated coroutine awaited {event!r}, which is no SimPy event") from None
        if callbacks is None:
            return False
        callbacks.append(self.resume)
        self._target = event
        self.mode = _WAIT
        return True

    @staticmethod
    def _outcome(event: Any) -> tuple[Any, BaseException | None]:
        if event._ok:
            return event._value, None
        # A failed event: raise a copy of its exception in the coroutine, defusing it, as
        # Process._resume does (SimPy 4.1.2), so the loop does not crash on it.
        event._defused = True
        failure = event._value
        exc = type(failure)(*failure.args)
        exc.__cause__ = failure
        return None, exc

    def _crashed(self) -> None:
        # A crashed process runs no more of its code; its finally blocks may run here
        # but anything they try on disk or network is refused (the runtime is dead).
        try:
            self.coro.close()
        except BaseException:
            pass
        self._end(True, CRASHED)

    def _end(self, ok: bool, value: Any) -> None:
        # Process._resume's end (SimPy 4.1.2): _ok and _value set, the process scheduled as a
        # NORMAL event now, with the environment's next eid, as Environment.schedule does
        self.rt.processes.pop(self, None)
        self._ok = ok
        self._value = value
        env = self.env
        heappush(env._queue, (env._now, NORMAL, next(env._eid), self))
