"""Conformance in the live world: a short load with no fault is VALID with reliable reads and
plain gets; and the design's server (``lab serve NAME``, started as the live world starts it)
starts and answers, survives a burst of malformed bytes on every port of its ready line
without dying or losing an acknowledged message, stops on SIGTERM and on SIGINT within a few
seconds, and leaves no process behind. A design without ``serve.py`` runs in the runner's
process when live: its server checks are skipped."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import time
from typing import Any

from lab.design.registry import design_module
from lab.experiments.conform.report import FAIL, PASS, SKIP, Line
from lab.experiments.conform.sim import no_fault
from lab.experiments.conform.target import Target

WORLD = "live"
MESSAGES = 40  # acknowledged before the burst, every one gettable after it
QUEUE = "conform"
STOP_S = 5.0  # seconds a server has to end on SIGTERM or SIGINT
SETTLE_S = 0.5  # after the burst, before the server is asked whether it lives
GET_DEADLINE_S = 15.0
STARTS = "live server: starts and answers"
BURST = "live server: survives malformed bytes on every port, keeps acknowledged messages"
SIGNALS = {signal.SIGTERM: "live server: stops on SIGTERM, leaves no process",
           signal.SIGINT: "live server: stops on SIGINT (Ctrl-C), leaves no process"}


def live_no_fault(target: Target) -> list[Line]:
    return no_fault(target, WORLD)


def garbage() -> list[bytes]:
    """What a broken or hostile client sends: noise, a request too long for any buffer,
    requests cut off halfway, and lines of protocols the port does not speak."""
    noise = random.Random(32).randbytes(64 * 1024)
    return [
        noise,
        b"A" * (1 << 20),  # one line, a MiB long, never ended
        b"GET /" + b"x" * 200_000 + b" HTTP/1.1\r\nHost: conform\r\n\r\n",  # an oversized request line
        b"POST /queues/conform/messages HTTP/1.1\r\nHost: conform\r\nContent-Length: 1000000000\r\n\r\nabc",
        b"GET /queues/conform HTTP/1.1\r\nHo",  # half a request, then the connection closes
        b"HTTP/1.1 200 OK\r\n\r\n" + b"\x00\xff" * 1000,
        b"set conform 0 0 99999999\r\nab",  # memcache: a value promised and never sent
        b"get " + b"k" * 70_000 + b"\r\n",
        b"\r\n\r\n\r\n",
    ]


async def _send(port: int, payload: bytes) -> None:
    """``payload`` on a fresh connection to ``port``, a moment to answer, then closed;
    whatever the server does about it (an error reply, a reset) is its right."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 3)
    except (OSError, asyncio.TimeoutError):
        return
    try:
        writer.write(payload)
        await asyncio.wait_for(writer.drain(), 3)
        await asyncio.wait_for(reader.read(65536), 0.3)
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()
        try:
            await asyncio.wait_for(writer.wait_closed(), 1)
        except (OSError, asyncio.TimeoutError):
            pass


def _group_left(pid: int) -> bool:
    """Is any process left in the group ``pid`` led (a server runs in a session of its own)?"""
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stop_with(proc: Any, sig: int) -> tuple[bool, float, bool]:
    """Send ``sig`` and wait: (stopped by itself within STOP_S, seconds, processes left);
    one that did not stop is killed, with its group."""
    popen: subprocess.Popen = proc.proc
    started = time.monotonic()
    popen.send_signal(sig)
    try:
        popen.wait(STOP_S)
        stopped = True
    except subprocess.TimeoutExpired:
        stopped = False
    seconds = time.monotonic() - started
    proc.stop(signal.SIGKILL)  # reaps it (and closes its pipe) if it is still there
    time.sleep(0.1)  # a child the server started is reparented and ends a moment after
    left = _group_left(popen.pid)
    if left:
        try:
            os.killpg(popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return stopped, seconds, left


async def _checks(target: Target, world: Any) -> list[Line]:
    loop = asyncio.get_running_loop()
    backend = target.cls(world, {})
    started = time.monotonic()
    try:
        await backend.start()
    except Exception as e:  # noqa: BLE001 (the finding)
        return [Line(STARTS, FAIL, f"{type(e).__name__}: {e}".splitlines()[0])]
    client = backend.client(world.node("p0"), False)
    acked, refused = [], []
    for seq in range(MESSAGES):
        body = f"conform:{seq} 0\n".encode()
        try:
            await client.put(QUEUE, body)
            acked.append(body)
        except Exception as e:  # noqa: BLE001
            refused.append(f"{type(e).__name__}: {e}")
    await client.close()
    ports = {node: dict(proc.ports) for node, proc in world.processes.items()}
    shown = ", ".join(f"{node} {' '.join(f'{n}={p}' for n, p in ps.items())}" for node, ps in ports.items())
    if not acked:
        return [Line(STARTS, FAIL, f"ready ({shown}) but no put was acknowledged: {refused[0] if refused else ''}")]
    lines = [Line(STARTS, PASS, f"ready in {time.monotonic() - started:.1f} s ({shown}); "
                                f"{len(acked)}/{MESSAGES} puts acknowledged")]

    sent = 0
    for named in ports.values():
        for number in named.values():
            for payload in garbage():
                await _send(number, payload)
                sent += 1
    await asyncio.sleep(SETTLE_S)
    dead = [f"{node} (exit {proc.proc.poll()}; log: {proc.log().strip()[-300:]!r})"
            for node, proc in world.processes.items() if not proc.running]
    if dead:
        lines.append(Line(BURST, FAIL, f"died after malformed bytes: {'; '.join(dead)}"))
    else:
        reader = backend.client(world.node("c0"), False)
        wanted = set(acked)
        got: set[bytes] = set()
        deadline = time.monotonic() + GET_DEADLINE_S
        empties = 0
        while wanted - got and time.monotonic() < deadline and empties < 3:
            try:
                delivery = await reader.get(QUEUE, 0.5)
            except Exception:  # noqa: BLE001 (a get that fails is retried until the deadline)
                await asyncio.sleep(0.1)
                continue
            if delivery is None:
                empties += 1
                continue
            got.add(delivery.body)
        await reader.close()
        missing = len(wanted - got)
        ports_count = sum(len(p) for p in ports.values())
        lines.append(Line(BURST, FAIL, f"alive, but {missing} of {len(acked)} acknowledged messages are gone")
                     if missing else
                     Line(BURST, PASS, f"{sent} malformed sends on {ports_count} port(s); all {len(acked)} "
                                       f"acknowledged messages gettable"))

    for sig, check in SIGNALS.items():
        procs = [p for p in world.processes.values() if p.running]
        if not procs:
            await asyncio.gather(*(loop.run_in_executor(None, p.restart) for p in world.processes.values()))
            procs = list(world.processes.values())
        outcomes = [await loop.run_in_executor(None, _stop_with, p, sig) for p in procs]
        slow = [f"{p.design} pid {p.pid}" for p, (stopped, _, _) in zip(procs, outcomes) if not stopped]
        left = [f"pid {p.pid}'s group" for p, (_, _, stays) in zip(procs, outcomes) if stays]
        worst = max(seconds for _, seconds, _ in outcomes)
        if slow or left:
            why = ([f"not stopped within {STOP_S:g} s (killed): {', '.join(slow)}"] if slow else []) + (
                [f"processes left in {', '.join(left)}"] if left else [])
            lines.append(Line(check, FAIL, "; ".join(why)))
        else:
            lines.append(Line(check, PASS, f"{len(procs)} process(es) ended in {worst:.1f} s at most, none left"))
    return lines


def server(target: Target) -> list[Line]:
    """The server checks, in one live world (the runner's world, without a load)."""
    if design_module(target.name, "serve") is None:
        why = "no lab serve: the design runs in the runner's process when live"
        return [Line(check, SKIP, why) for check in (STARTS, BURST, *SIGNALS.values())]
    if WORLD not in target.cls.worlds:
        return [Line(STARTS, SKIP, f"{target.name} does not run in the live world")]
    from lab.worlds.live.world import LiveWorld

    root = target.out("server")
    root.mkdir()  # the world's root exists before a server starts (a design writes its config there)
    world = LiveWorld(7, root=root)
    world.logs_to = target.out("server-logs")
    return world.run(lambda control: _checks(target, world))
