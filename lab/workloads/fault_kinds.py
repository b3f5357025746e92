"""The fault kinds: each parses its own fields, picks the nodes (and links) it hits from the
run's seed, and breaks a world in a way its heal undoes. Each class is the one home of what
its kind does (its docstring) and of its fields (``own_field``: default and meaning); the
reference page is generated from them (``lab.workloads.fault_reference``), and
``lab.workloads.faults`` registers them."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Iterable

from lab.design.runtime import Runtime
from lab.workloads.fault_base import (MODES, SHAPES, SIDED_SHAPES, Cast, Fault, FaultWorld, FieldError, Heal, Link,
                                      Placement, is_number, milliseconds, own_field, restarts)


@dataclass(frozen=True)
class Pause(Fault):
    """Stop the world on the targets (a GC pause): none of their code runs, and messages to
    them wait until it heals."""

    kind: ClassVar[str] = "pause"

    def start(self, world: FaultWorld, placement: Placement, rt: Runtime) -> Heal:
        for node in placement.nodes:
            world.pause(node)

        def heal() -> None:
            for node in placement.nodes:
                world.resume(node)
        return heal


@dataclass(frozen=True)
class Crash(Fault):
    """The targets' machines crash (kill -9, and what was not fsynced is lost); they restart on
    the same disk when it heals."""

    kind: ClassVar[str] = "crash"
    restarts: ClassVar[bool] = True
    tear: bool = own_field(False, "a random prefix of each file's unsynced tail survives the crash")

    @classmethod
    def parse_fields(cls, entry: dict[str, Any]) -> dict[str, Any]:
        tear = entry.get("tear", False)
        if not isinstance(tear, bool):
            raise FieldError("tear", f"must be true or false, got {tear!r}")
        return {"tear": tear}

    def start(self, world: FaultWorld, placement: Placement, rt: Runtime) -> Heal:
        for node in placement.nodes:
            world.crash(node, tear=self.tear)
        return restarts(world, placement.nodes)


@dataclass(frozen=True)
class Kill(Fault):
    """The targets' server processes die (kill -9) and their machines stay up: what they
    wrote and did not fsync survives in the page cache. They restart when it heals."""

    kind: ClassVar[str] = "kill"
    restarts: ClassVar[bool] = True

    def start(self, world: FaultWorld, placement: Placement, rt: Runtime) -> Heal:
        for node in placement.nodes:
            world.kill(node)
        return restarts(world, placement.nodes)


@dataclass(frozen=True)
class Partition(Fault):
    """Cut links (Jepsen's grudges): the targets from every other node, or one of Jepsen's
    shapes over the targets; both ways or one way; held, or flapping on and off."""

    kind: ClassVar[str] = "partition"
    hits_process: ClassVar[bool] = False  # links only: the live world's proxies reach clients too
    shape: str = own_field("isolate", "which links are cut: " + ", ".join(f"`{s}`" for s in SHAPES)
                           + " (the shapes below)")
    mode: str = own_field("isolate", "`isolate`: both ways; `one-way-in` / `one-way-out`: only the messages into / "
                          "out of the cut-off side (shapes with one: " + ", ".join(SIDED_SHAPES) + ")")
    flap: float = own_field(0.0, "seconds: the cut switches off and on every `flap` seconds while the fault lasts "
                            "(0: it holds)")

    @classmethod
    def parse_fields(cls, entry: dict[str, Any]) -> dict[str, Any]:
        shape, mode, flap = entry.get("shape", "isolate"), entry.get("mode", "isolate"), entry.get("flap", 0)
        if shape not in SHAPES:
            raise FieldError("shape", f"must be one of {', '.join(SHAPES)}, got {shape!r}")
        if mode not in MODES:
            raise FieldError("mode", f"must be one of {', '.join(MODES)}, got {mode!r}")
        if mode != "isolate" and shape not in SIDED_SHAPES:
            raise FieldError("mode", f"{mode} needs a shape with one cut-off side ({', '.join(SIDED_SHAPES)}), "
                                     f"not {shape}")
        if shape == "clients" and "target" in entry:
            raise FieldError("target", "shape clients cuts every client from every server: it takes no target")
        if not (is_number(flap) and flap >= 0):
            raise FieldError("flap", f"seconds between switches (0: no flapping), a number >= 0, got {flap!r}")
        return {"shape": shape, "mode": mode, "flap": float(flap)}

    def place(self, cast: Cast, rng: random.Random) -> Placement:
        if self.shape == "clients":
            return self._sides(list(cast.clients), list(cast.servers))
        nodes = cast.resolve(self.target, rng)
        if self.shape == "isolate":
            return self._sides(nodes, [n for n in cast.all if n not in nodes])
        shuffled = rng.sample(nodes, len(nodes))  # the grudge falls on random nodes (Jepsen shuffles)
        n = len(shuffled)
        if self.shape == "one":
            return self._sides(shuffled[:1], shuffled[1:])
        if self.shape == "minority":
            return self._sides(shuffled[: (n - 1) // 2], shuffled[(n - 1) // 2:])
        if self.shape in ("majority", "halves"):
            return self._sides(shuffled[: n // 2], shuffled[n // 2:])
        if self.shape == "bridge":
            left, bridge, right = shuffled[: n // 2], shuffled[n // 2: n // 2 + 1], shuffled[n // 2 + 1:]
            links = _between(left, right) + _between(right, left)
            return self._placement(links, f"{' '.join(left)} | {' '.join(right)}, bridged by {' '.join(bridge)}")
        # majorities-ring: on a ring, each node keeps the nodes within k steps: itself and 2k
        # neighbours make a majority, and no two nodes keep the same one.
        k = math.ceil((n // 2) / 2)
        links = [(a, b) for i, a in enumerate(shuffled) for j, b in enumerate(shuffled)
                 if min((i - j) % n, (j - i) % n) > k]
        return self._placement(links, "ring " + " ".join(shuffled) + f", each node sees {2 * k + 1}")

    def _sides(self, side: list[str], other: list[str]) -> Placement:
        links = []
        if self.mode in ("isolate", "one-way-in"):
            links += _between(other, side)
        if self.mode in ("isolate", "one-way-out"):
            links += _between(side, other)
        arrow = {"isolate": "|", "one-way-in": "<-/-", "one-way-out": "-/->"}[self.mode]
        return self._placement(links, f"{' '.join(side)} {arrow} {' '.join(other)}")

    def _placement(self, links: list[Link], detail: str) -> Placement:
        if not links:
            raise FieldError("shape", f"shape {self.shape} cuts no link between these nodes ({detail})")
        nodes = tuple(dict.fromkeys(node for link in links for node in link))
        return Placement(nodes, tuple(links), detail)

    def start(self, world: FaultWorld, placement: Placement, rt: Runtime) -> Heal:
        cut = [False]

        def switch(on: bool) -> None:
            if on != cut[0]:
                for link in placement.links:
                    (world.block if on else world.unblock)(*link)
                cut[0] = on

        switch(True)
        flapper = rt.spawn(self._flap(rt, switch, cut), name="flap") if self.flap else None

        def heal() -> None:
            if flapper is not None:
                flapper.cancel()
            switch(False)

        return heal

    async def _flap(self, rt: Runtime, switch: Callable[[bool], None], cut: list[bool]) -> None:
        while True:
            await rt.sleep(self.flap)
            switch(not cut[0])


def _between(sources: list[str], destinations: list[str]) -> list[Link]:
    return [(a, b) for a in sources for b in destinations if a != b]


def _links_of(nodes: Iterable[str], cast: Cast) -> tuple[Link, ...]:
    """Every link to or from one of ``nodes``, both ways."""
    nodes = list(nodes)
    return tuple(dict.fromkeys(link for node in nodes for other in cast.all if other != node
                               for link in ((node, other), (other, node))))


@dataclass(frozen=True)
class LinkDelay(Fault):
    """Every message on a link to or from a target takes longer."""

    kind: ClassVar[str] = "link-delay"
    hits_process: ClassVar[bool] = False  # links only: the live world's proxies reach clients too
    ms: float = own_field(0.0, "milliseconds added to every message on the links", example=50)
    jitter_ms: float = own_field(0.0, "plus a uniform 0 to `jitter_ms` more, per message")

    @classmethod
    def parse_fields(cls, entry: dict[str, Any]) -> dict[str, Any]:
        return {"ms": milliseconds(entry, "ms", "added to every message on the links"),
                "jitter_ms": milliseconds(entry, "jitter_ms", "", required=False)}

    def place(self, cast: Cast, rng: random.Random) -> Placement:
        nodes = cast.resolve(self.target, rng)
        return Placement(tuple(nodes), _links_of(nodes, cast), " ".join(nodes))

    def start(self, world: FaultWorld, placement: Placement, rt: Runtime) -> Heal:
        extra, jitter = round(self.ms * 1e6), round(self.jitter_ms * 1e6)
        for link in placement.links:
            world.add_delay(*link, extra, jitter)

        def heal() -> None:
            for link in placement.links:
                world.remove_delay(*link, extra, jitter)
        return heal


@dataclass(frozen=True)
class Loss(Fault):
    """Drop each message on a link to or from a target, with a probability."""

    kind: ClassVar[str] = "loss"
    hits_process: ClassVar[bool] = False  # links only: the live world's proxies reach clients too
    p: float = own_field(0.0, "the probability that each message on the links is dropped, in (0, 1]", example=0.1)

    @classmethod
    def parse_fields(cls, entry: dict[str, Any]) -> dict[str, Any]:
        p = entry.get("p")
        if not (is_number(p) and 0 < p <= 1):
            raise FieldError("p", f"a loss fault needs a probability 'p' in (0, 1], got {p!r}")
        return {"p": float(p)}

    def place(self, cast: Cast, rng: random.Random) -> Placement:
        nodes = cast.resolve(self.target, rng)
        return Placement(tuple(nodes), _links_of(nodes, cast), " ".join(nodes))

    def start(self, world: FaultWorld, placement: Placement, rt: Runtime) -> Heal:
        for link in placement.links:
            world.add_loss(*link, self.p)

        def heal() -> None:
            for link in placement.links:
                world.remove_loss(*link, self.p)
        return heal


@dataclass(frozen=True)
class DiskDelay(Fault):
    """Every fsync on the targets takes longer (delayed writes)."""

    kind: ClassVar[str] = "disk-delay"
    ms: float = own_field(0.0, "milliseconds added to each fsync", example=20)

    @classmethod
    def parse_fields(cls, entry: dict[str, Any]) -> dict[str, Any]:
        return {"ms": milliseconds(entry, "ms", "added to every fsync")}

    def start(self, world: FaultWorld, placement: Placement, rt: Runtime) -> Heal:
        extra = round(self.ms * 1e6)
        for node in placement.nodes:
            world.add_fsync_delay(node, extra)

        def heal() -> None:
            for node in placement.nodes:
                world.remove_fsync_delay(node, extra)
        return heal


#: gc presets: the defaults of a gc fault's fields (a field the entry gives overrides its preset's)
GC_PRESETS: dict[str, dict[str, float]] = {
    # A JVM under a generational collector: minor collections several times a second, a
    # few ms to a few tens of ms each; a full (old-generation) collection every few seconds,
    # hundreds of ms. Lognormal lengths give the long tail a collector's pauses have.
    "jvm": {"young_every": 0.3, "young_ms": 12.0, "full_every": 2.0, "full_ms": 400.0, "sigma": 0.4},
}


@dataclass(frozen=True)
class GcPause:
    """One drawn stop-the-world pause: ``start`` seconds after the fault starts, for ``length`` seconds."""

    node: str
    start: float
    length: float
    kind: str  # "young" or "full"


@dataclass(frozen=True)
class GcPlacement(Placement):
    """A gc fault's placement: its nodes and every pause it will hold on them, in time order."""

    pauses: tuple[GcPause, ...] = ()


@dataclass(frozen=True)
class Gc(Fault):
    """Stop-the-world pauses on each target, drawn per node while the fault lasts (a
    garbage-collected runtime). Young pauses come at gaps drawn uniformly from half to one and
    a half times ``young_every`` (a generation fills at the allocation rate: roughly periodic),
    the first at a random phase within one ``young_every``, and last a lognormal time of
    median ``young_ms`` and shape ``sigma``; full pauses likewise (``full_every``,
    ``full_ms``), so a fault as long as ``full_every`` has at least one. One collector: a pause
    that comes while another holds the node starts when it ends. The heal ends any pause in
    force. A preset gives the fields' defaults; a class of pause with ``*_every`` 0 never
    happens."""

    kind: ClassVar[str] = "gc"
    # the dataclass defaults are placeholders: parse_fields fills each field from the preset
    preset: str = own_field("jvm", "the defaults of the fields below: " + "; ".join(
        f"`{name}`: " + ", ".join(f"{k} {v:g}" for k, v in values.items()) for name, values in GC_PRESETS.items()))
    young_every: float = own_field(0.0, "the mean gap between young pauses, in seconds (0: none)")
    young_ms: float = own_field(0.0, "the median young pause, in milliseconds")
    full_every: float = own_field(0.0, "the mean gap between full pauses, in seconds (0: none)")
    full_ms: float = own_field(0.0, "the median full pause, in milliseconds")
    sigma: float = own_field(0.0, "the lognormal shape of the pause lengths")

    @classmethod
    def parse_fields(cls, entry: dict[str, Any]) -> dict[str, Any]:
        preset = entry.get("preset", "jvm")
        if preset not in GC_PRESETS:
            raise FieldError("preset", f"must be one of {', '.join(GC_PRESETS)}, got {preset!r}")
        fields = {"preset": preset}
        for spec in cls.own_fields()[1:]:  # the preset's fields
            key = spec.name
            value = entry.get(key, GC_PRESETS[preset][key])
            positive = key.endswith("_ms")  # a pause that takes no time is no pause
            if not (is_number(value) and (value > 0 if positive else value >= 0)):
                raise FieldError(key, f"{spec.metadata['meaning']}: a number {'>' if positive else '>='} 0, "
                                      f"got {value!r}")
            fields[key] = float(value)
        if not fields["young_every"] and not fields["full_every"]:
            raise FieldError("young_every", "young_every and full_every are both 0: the fault would pause nothing")
        return fields

    def place(self, cast: Cast, rng: random.Random) -> GcPlacement:
        """The targets and every pause the fault will hold on them, drawn now from the same
        seeded source as the targets, one stream per node."""
        nodes = tuple(cast.resolve(self.target, rng))
        base = rng.getrandbits(64)  # after the targets' picks: a node's pauses do not depend on the others'
        pauses = sorted((p for node in nodes for p in self._draw(node, random.Random(f"{base}:gc:{node}"))),
                        key=lambda p: (p.start, p.node))
        full = sum(p.kind == "full" for p in pauses)
        longest = max((p.length for p in pauses), default=0.0)
        detail = f"{' '.join(nodes)}: {len(pauses) - full} young and {full} full pauses, longest {longest * 1e3:.0f} ms"
        return GcPlacement(nodes, detail=detail, pauses=tuple(pauses))

    def _draw(self, node: str, rng: random.Random) -> list[GcPause]:
        """One node's pauses over the fault's duration (the rules in the class's doc): each
        class at uniform gaps around its mean, from a random phase, with lognormal lengths; a
        pause that comes while the collector is busy waits for it, and the last one ends
        with the fault. (Not Poisson arrivals: with a handful of full pauses per run, their
        count would vary more between seeds than between designs.)"""
        arrivals = []
        for kind, every, median_ms in (("young", self.young_every, self.young_ms),
                                       ("full", self.full_every, self.full_ms)):
            if not every:
                continue
            t = rng.uniform(0, every)
            while t < self.duration:
                arrivals.append((t, kind, rng.lognormvariate(math.log(median_ms / 1e3), self.sigma)))
                t += rng.uniform(0.5 * every, 1.5 * every)
        pauses: list[GcPause] = []
        busy_until = 0.0
        for t, kind, length in sorted(arrivals):
            start = max(t, busy_until)
            if start >= self.duration:
                break
            busy_until = min(start + length, self.duration)
            pauses.append(GcPause(node, start, busy_until - start, kind))
        return pauses

    def start(self, world: FaultWorld, placement: Placement, rt: Runtime) -> Heal:
        pauses = placement.pauses if isinstance(placement, GcPlacement) else ()
        holding: set[str] = set()  # nodes a pause of this fault holds now
        healed = [False]

        async def collect(node: str, mine: list[GcPause]) -> None:
            t0 = rt.now()
            for pause in mine:
                await rt.sleep(max(0.0, t0 + pause.start - rt.now()))
                if healed[0]:
                    return
                world.pause(node)
                holding.add(node)
                await rt.sleep(pause.length)
                if healed[0]:
                    return  # the heal resumed it
                holding.discard(node)
                world.resume(node)

        tasks = [rt.spawn(collect(node, [p for p in pauses if p.node == node]), name=f"gc {node}")
                 for node in placement.nodes]

        def heal() -> None:
            healed[0] = True
            for task in tasks:
                task.cancel()
            for node in sorted(holding):
                world.resume(node)
            holding.clear()

        return heal


@dataclass(frozen=True)
class LateWrites(Fault):
    """The simulated store on a target (CassieQ's Cassandra node, sim world) applies each message
    write late or never, as the design options ``cassandra_late_write_p`` ... do for a whole
    run; a target that runs no simulated store is untouched."""

    kind: ClassVar[str] = "late-writes"
    worlds: ClassVar[tuple[str, ...]] = ("sim",)  # not live: no live store has a hook for it
    late_p: float = own_field(0.1, "the probability that a write is applied and answered `late_s` later")
    late_s: float = own_field(1.0, "seconds a late write lands after it was sent (> 0)")
    ghost_p: float = own_field(0.0, "the probability that a write is never applied nor answered (a ghost); "
                               "`late_p + ghost_p` in (0, 1]")

    @classmethod
    def parse_fields(cls, entry: dict[str, Any]) -> dict[str, Any]:
        fields = {}
        for key, default in (("late_p", cls.late_p), ("ghost_p", cls.ghost_p)):
            value = entry.get(key, default)
            if not (is_number(value) and 0 <= value <= 1):
                raise FieldError(key, f"a probability from 0 to 1, got {value!r}")
            fields[key] = float(value)
        chance = fields["late_p"] + fields["ghost_p"]
        if not 0 < chance <= 1:
            raise FieldError("late_p", f"late_p + ghost_p must be in (0, 1], got {chance:g}")
        late_s = entry.get("late_s", cls.late_s)
        if not (is_number(late_s) and late_s > 0):
            raise FieldError("late_s", f"seconds a late write lands after it was sent, a number > 0, got {late_s!r}")
        return {**fields, "late_s": float(late_s)}

    def start(self, world: FaultWorld, placement: Placement, rt: Runtime) -> Heal:
        args = (self.late_p, self.late_s, self.ghost_p)
        for node in placement.nodes:
            world.add_late_writes(node, *args)

        def heal() -> None:
            for node in placement.nodes:
                world.remove_late_writes(node, *args)
        return heal


@dataclass(frozen=True)
class DiskLoss(Fault):
    """A crash that also destroys the targets' disks (a machine replaced): nothing the node
    wrote survives, fsynced or not, so only a copy on another node can save a message. They
    restart on an empty disk when it heals and rejoin as their design allows. The history's
    fault rows name the nodes (``lab.history.phases``): which disks were lost, and when."""

    kind: ClassVar[str] = "disk-loss"
    restarts: ClassVar[bool] = True

    def start(self, world: FaultWorld, placement: Placement, rt: Runtime) -> Heal:
        for node in placement.nodes:
            world.destroy_disk(node)
        # as a crash's heal: each restart ends this fault's hold; one still held down by
        # another crash restarts when that one heals (on the empty disk all the same)
        return restarts(world, placement.nodes)
