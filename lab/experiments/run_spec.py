"""One run, resolved once at the runner's door: ``RunSpec``.

Whoever asks for a run — a command, an experiment, a notebook — names a workload, a design,
a world, options, perhaps a seed and a calibration. ``RunSpec.resolve`` turns the names into
the things, once: the design's class, its options checked with defaults filled in
(``Checked``: a ``Backend`` takes them as they are), the promises they give under the
workload's read mode, the workload with its seed applied (each ranged fault time drawn for
it: the seed has one track, the workload's), and the sim world's CPU model loaded. The
world, the clients, the nemesis, the checker and the manifest read the spec; nothing
downstream resolves a name, checks an option or reads a calibration file again.

A run folder's manifest is the spec written out (``manifest``), with what the run found
beside it; ``lab.judge.verdict.RunFacts.from_manifest`` reads back what judging needs, so a
judged run can be judged again from its folder alone, the design's promises included.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from lab.design.backend import Backend
from lab.design.options import BadOption, Checked
from lab.design.promises import Promises
from lab.design.registry import CONTROL, backend_class
from lab.design.service import ServiceModel, ServiceModelError
from lab.judge.verdict import RunFacts
from lab.workloads.clients import refuse_deaths
from lab.workloads.errors import WorkloadError
from lab.workloads.spec import Workload

WORLDS = ("sim", "live")
NO_CALIBRATION = "none"  # ``--calibration none``: the sim's server nodes cost no CPU time


@dataclass(frozen=True)
class Calibration:
    """The sim world's CPU model of a run's server nodes: the service times (None: no CPU
    model) and where they came from, for the manifest."""

    model: ServiceModel | None
    source: str

    @classmethod
    def load(cls, path: str | Path) -> "Calibration":
        """A calibration file (``lab calibrate`` writes them), or ``none``; WorkloadError
        saying what is wrong with a file that is not one."""
        if str(path) == NO_CALIBRATION:
            return cls(None, NO_CALIBRATION)
        try:
            return cls(ServiceModel.load(path), str(Path(path).resolve()))
        except ServiceModelError as e:
            raise WorkloadError(f"calibration {path}: {e}") from None

    @classmethod
    def resolve(cls, design: type[Backend], options: Checked, world: str,
                asked: "str | Calibration | None") -> "Calibration":
        """``asked``: a calibration file, ``none``, one loaded already, or None for the
        design's own (its committed calibration, or what its options say). The live world
        has a real CPU: none."""
        if world != "sim":
            return cls(None, "the live world's own CPU")
        if isinstance(asked, Calibration):
            return asked
        if asked is not None:
            return cls.load(asked)
        model = design.cpu.model(design, options)
        if model is None:  # zero CPU time would let a new design's races never happen: the lab's default
            return cls.lab_default(design.name)
        return cls(model, model.source)

    @classmethod
    def lab_default(cls, name: str) -> "Calibration":
        """The CPU model a design with no calibration of its own runs on: the control's
        (``ideal``'s committed calibration), its slowest request kind's time for every kind it
        did not measure — a stated stand-in, not zero CPU time."""
        control = backend_class(CONTROL)
        path = control.cpu.path(control)
        if path is None or not path.exists():
            raise WorkloadError(f"{name} has no calibration.yaml, and the control's is missing: run `lab calibrate {name}`")
        model = ServiceModel.load(path)
        slowest = max(model.kinds.items(), key=lambda item: item[1].mean_ns)
        default = model.default if model.default is not None else slowest[1]
        what = f"{CONTROL}'s calibration, {slowest[0]}'s service time for other request kinds"
        source = (f"the lab's default CPU model: {what} ({path}); {name} has no calibration.yaml — "
                  f"run `lab calibrate {name}`")
        return cls(dataclasses.replace(model, default=default, source=source), source)


@dataclass(frozen=True)
class RunSpec:
    """Everything one run is: resolved once, read by every part of it."""

    workload: Workload  # seeded: its ``seed`` is the run's, its ranged fault times drawn for it
    design: type[Backend]
    options: Checked  # the design's options, checked, defaults filled in
    promises: Promises  # what the design promises under them with the workload's read mode
    world: str  # "sim" or "live"
    calibration: Calibration

    @classmethod
    def resolve(cls, workload: Workload, backend: str, world: str = "sim", *, seed: int | None = None,
                options: Mapping[str, Any] | None = None,
                calibration: "str | Calibration | None" = None) -> "RunSpec":
        """The spec of a run of ``workload`` against design ``backend`` in ``world``;
        ``calibration`` (sim only: a file, ``none`` or one loaded) overrides the workload's
        ``sim: calibration``. Raises ``UnknownBackend``, ``BadOption`` or ``WorkloadError``
        with one line saying what is wrong, before anything runs or is written."""
        if world not in WORLDS:
            raise WorkloadError(f"unknown world {world!r} (sim or live)")
        design = backend_class(backend)
        if world not in design.worlds:
            raise WorkloadError(f"backend {backend!r} runs in the {' and '.join(design.worlds)} world(s), not "
                                f"{world!r}" + (" (--world live)" if design.worlds == ("live",) else ""))
        if workload.timeout is not None and "timeout" not in (options or {}):  # the run's own option wins
            if not any(option.name == "timeout" for option in design.options_declared):
                raise WorkloadError(f"{workload.source}: field 'timeout': {backend}'s clients take no timeout "
                                    "option to set")
            options = {**(options or {}), "timeout": workload.timeout}
        checked = design.check_options(options, world)
        workload = workload.with_seed(workload.seed if seed is None else seed)
        if calibration is not None and world != "sim":  # asked for: a mistake (a workload's sim block is the sim's)
            raise WorkloadError("a calibration sets the sim world's CPU model; the live world has a real CPU")
        asked = calibration if calibration is not None else workload.sim.get("calibration")
        promises = design.promises(checked, workload.reliable)
        if (why := refuse_deaths(workload.clients, workload.reliable, promises.brings_back, promises.by)) is not None:
            raise WorkloadError(f"{workload.source}: field 'clients': {why}")
        if (why := _refuse_own_options(design, workload, checked, promises, world)) is not None:
            raise WorkloadError(f"{workload.source}: field {why}")
        return cls(workload, design, checked, promises, world, Calibration.resolve(design, checked, world, asked))

    @property
    def backend(self) -> str:
        return self.design.name

    @property
    def seed(self) -> int:
        return self.workload.seed

    def facts(self, faults: frozenset[str]) -> RunFacts:
        """What the checker judges the run by, ``faults`` the kinds that started."""
        return RunFacts(self.backend, self.options, self.workload.reliable, tuple(sorted(faults)), self.promises)

    def manifest(self) -> dict[str, Any]:
        """The spec as a run folder's manifest writes it."""
        written: dict[str, Any] = {
            "workload": dataclasses.asdict(self.workload),
            "backend": self.backend,
            "options": dict(self.options),  # checked, defaults filled in: what the verdict was judged by
            "promises": self.promises.to_dict(),  # so that the run is judged again from its folder alone
            "world": self.world,
            "seed": self.seed,
        }
        if self.world == "sim":
            written["calibration"] = self.calibration.source
        return written


def _refuse_own_options(design: type[Backend], workload: Workload, checked: Checked, promises: Promises,
                        world: str) -> str | None:
    """Why the consumers' own ``options`` (a ``clients:`` entry's) cannot run, or None: each
    must be an option the design declares ``per_consumer`` and take its value, and the
    consumer's whole set must leave the design's promises as the run's options give them —
    a run is judged by one set of promises, which a consumer's setting must not change unseen."""
    own = sorted(option.name for option in design.options_declared if option.per_consumer)
    for name, plan in sorted(workload.clients.items()):
        if not plan.options:
            continue
        where = f"'clients.{name}.options'"
        unknown = [key for key, _ in plan.options if key not in own]
        if unknown:
            return (f"{where}: {unknown[0]!r} is not an option a consumer of {design.name} may set for itself "
                    f"(those are: {', '.join(own) or 'none'})")
        try:
            mine = design.check_options({**checked, **dict(plan.options)}, world)
        except BadOption as e:
            return f"{where}: {e}"
        if design.promises(mine, workload.reliable) != promises:
            given = ", ".join(f"{key}={value!r}" for key, value in plan.options)
            return (f"{where}: {given} changes what {design.name} promises; a run is judged by one set of "
                    "promises (give the option to the whole run instead)")
    return None
