"""Conformance, the client's side of the Runtime's error contract: what a design's client does
when its servers crash, when the network cuts it off, and when nothing listens — the three
events the Runtime reports the same way in both worlds (``ConnectionLost``, ``CallTimeout``,
``Unreachable``). Each event is made in a sim world, by the world's own fault hooks, while one
put is under way, and the put must:

- not be acknowledged (an ``ok`` with every server down is a lie the judge would call a loss);
- end within a bound (a client that retries for ever stalls its producer and every run);
- raise what the runner can classify: an unknown outcome (``info``) where the put may have
  been applied — a crash, a cut — and not a world's own exception (an ``OSError``, asyncio's
  ``TimeoutError``) that the other world never raises;
- leave the same client working: once the event clears, a put succeeds again (a client that
  failed over or reconnected), within ``RECOVER_S``.

A refused connection may be called a failure (``Unreachable``: nothing was sent) or an unknown
outcome; the line says which. The check needs only the design's Backend and its client."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from lab.design.backend import outcome_of
from lab.design.runtime import CallTimeout, ConnectionLost, Unreachable
from lab.experiments.conform.report import FAIL, PASS, SKIP, Line
from lab.experiments.conform.target import Target

CHECK = "sim: the client's errors (a crash, a cut, a refused connection)"
CLIENT = "conform-client"
QUEUE = "conform"
RECOVER_S = 15.0  # seconds after an event clears within which the same client must put again
POLL_S = 0.05
#: exceptions of one world's own machinery: a client that lets them out meets the other world
#: with an error it never catches (the Runtime's own errors subclass them, and are the contract)
WORLD_ERRORS: tuple[type[BaseException], ...] = (OSError, TimeoutError)
RUNTIME_ERRORS: tuple[type[BaseException], ...] = (CallTimeout, ConnectionLost, Unreachable)


@dataclass
class Event:
    """One of the three: ``make`` starts it on the servers, ``clear`` ends it (each given the
    world, the servers and a dict to keep what ``clear`` restores); ``unknown``: the put may
    have been applied, so its outcome must be ``info``."""

    name: str
    make: Callable[[Any, list[str], dict], Awaitable[None]]
    clear: Callable[[Any, list[str], dict], Awaitable[None]]
    unknown: bool


async def _crash(world, servers: list[str], _: dict) -> None:
    for node in servers:
        world.crash(node)


async def _restart(world, servers: list[str], _: dict) -> None:
    for node in servers:
        world.restart(node)


async def _cut(world, servers: list[str], _: dict) -> None:
    for node in servers:
        world.block(CLIENT, node)
        world.block(node, CLIENT)


async def _heal(world, servers: list[str], _: dict) -> None:
    for node in servers:
        world.unblock(CLIENT, node)
        world.unblock(node, CLIENT)


async def _refuse(world, servers: list[str], kept: dict) -> None:
    """Every server up again and none listening, so the client's next connection is refused,
    as to a machine whose server process is not started: a crash resets what the client had
    open, and once each restart has opened its ports they are closed."""
    await _crash(world, servers, kept)
    await _restart(world, servers, kept)
    control = world.node("control")
    for node in servers:
        for _ in range(round(10 / POLL_S)):  # a boot opens its ports as it starts
            net = world.nodes[node].runtime.net
            if net.streams.ports or net.handler is not None:
                break
            await control.sleep(POLL_S)
        net = world.nodes[node].runtime.net
        kept[node] = (dict(net.streams.ports), net.handler)  # its stream ports, its calls' handler
        net.streams.ports.clear()
        net.handler = None


async def _listen(world, servers: list[str], kept: dict) -> None:
    for node in servers:
        ports, handler = kept.pop(node)
        net = world.nodes[node].runtime.net
        net.streams.ports.update(ports)
        net.handler = handler


EVENTS = (Event("crash", _crash, _restart, True), Event("cut", _cut, _heal, True),
          Event("refused", _refuse, _listen, False))


def client_errors(target: Target) -> list[Line]:
    """One line: PASS if the design's client meets each event as the module says, else FAIL
    naming the first event it does not."""
    if "sim" not in target.cls.worlds:
        return [Line(CHECK, SKIP, f"{target.name} runs in the {' and '.join(target.cls.worlds)} world(s) only")]
    from models.world import SimWorld

    world = SimWorld(seed=7)
    design = target.cls(world)
    servers = list(design.server_nodes)
    timeout = float(design.options.get("timeout", 1.0))
    bound = 3 * timeout * len(servers) + 2  # every server tried, with a retry each, and a margin

    async def main(control) -> tuple[str | None, list[str]]:  # why it fails (None: it does not), what it saw
        await design.start()
        await design.prepare([QUEUE])
        rt = world.node(CLIENT)
        client = design.client(rt, False)
        said: list[str] = []
        try:
            baseline = await _put(rt, client, bound)
            if baseline != "ok":
                return f"a put with no fault did not succeed ({baseline})", said
            for event in EVENTS:
                kept: dict = {}
                await event.make(world, servers, kept)
                await rt.sleep(0.1)  # the event in force before the put starts
                outcome = await _put(rt, client, bound)
                await event.clear(world, servers, kept)
                problem = _judge(event, outcome, bound)
                if problem:
                    return f"{event.name}: {problem}", said
                said.append(f"{event.name}: {outcome}")
                await world.settle()
                recovered = await _recovers(rt, client, bound)
                if recovered is not None:
                    return f"{event.name}: {recovered}", said
        finally:
            await client.close()
            await design.stop()
        return None, said

    failed, said = world.run(main)
    if failed is not None:
        return [Line(CHECK, FAIL, failed)]
    return [Line(CHECK, PASS, "; ".join(said) + f"; each put ended within {bound:g} s and the client put again after")]


async def _put(rt, client, bound: float) -> str:
    """One put, given ``bound`` seconds: ``ok``, ``hung``, or ``outcome Type: message``."""
    body = f"conform {rt.now_ns()}".encode()
    done: dict[str, str] = {}

    async def attempt() -> None:
        try:
            await client.put(QUEUE, body)
            done["outcome"] = "ok"
        except Exception as e:  # noqa: BLE001 (what it raises is what the check reads)
            done["outcome"] = f"{outcome_of(e)} {type(e).__name__}: {e}".splitlines()[0]
            done["world"] = "yes" if isinstance(e, WORLD_ERRORS) and not isinstance(e, RUNTIME_ERRORS) else ""

    task = rt.spawn(attempt(), name="conform put")
    deadline = rt.now() + bound
    while not task.done() and rt.now() < deadline:
        await rt.sleep(POLL_S)
    if not task.done():
        task.cancel()
        return "hung"
    if done.get("world"):
        return f"world {done['outcome']}"
    return done["outcome"]


def _judge(event: Event, outcome: str, bound: float) -> str | None:
    """Why ``outcome`` breaks the contract under ``event``, or None."""
    if outcome == "ok":
        return "the put was acknowledged with no server to take it"
    if outcome == "hung":
        return f"the put had not ended {bound:g} s later (a client that retries for ever stalls its run)"
    if outcome.startswith("world "):
        return (f"raised {outcome.split(' ', 2)[2]} — a world's own exception, which the other world "
                f"does not raise; raise (or let through) the Runtime's CallTimeout, ConnectionLost or Unreachable")
    if event.unknown and outcome.startswith("fail "):
        return (f"raised {outcome[len('fail '):]}, a certain failure, where the put may have been applied; "
                f"an unknown outcome is CallTimeout or ConnectionLost (lab.design.outcome_of)")
    return None


async def _recovers(rt, client, bound: float) -> str | None:
    """None once the same client puts again within ``RECOVER_S``; else why not."""
    deadline = rt.now() + RECOVER_S
    last = ""
    while rt.now() < deadline:
        last = await _put(rt, client, bound)
        if last == "ok":
            return None
        await rt.sleep(0.2)
    return f"once it cleared, the same client could not put again within {RECOVER_S:g} s (last: {last})"
