"""Workload files (YAML), in the spirit of OpenMessaging Benchmark: one file, one scenario.

    name: steady-1p1c          # required
    description: one line      # what the workload shows (``lab workloads`` lists it)
    queues: 1                  # queues the producers spread over
    producers: 1
    consumers: 1               # 0: puts alone; one consumer drains the queues after the load
    message_size: 100          # bytes per message body
    rate: 1000                 # messages/s in total; 0 = as fast as possible (closed loop)
    arrivals: constant         # with a rate: constant gaps, closed loop behind a rate limiter,
                               # or poisson: exponential gaps, open loop (each put at its time)
    duration: 5                # seconds of load after warm-up ... or
    messages: 10000            # ... a total number of messages (exactly one of the two)
    ack: auto                  # auto: a get removes the message; reliable: get, then ack
    warmup: 1                  # seconds at the start whose samples are marked "warmup"
    consumer_delay: 0          # seconds after the start before the consumers begin: a backlog builds
    clients: {}                # one client's own start, stop, rate, size, queue(s), pace, pauses
                               # (lab.workloads.clients: p1: {start: 0.8}, c0: {work_ms: 40})
    timeout: 1                 # seconds the clients wait for a reply (default: the design's option)
    seed: 42                   # the run's seed (the CLI's --seed overrides it)
    faults: []                 # a fault schedule: entries as lab.workloads.faults describes them (an
                               # entry's `at` may be a range [from, to], drawn per seed)
    recover_within: 3          # seconds: the liveness budget after the last heal (default none)
    sim: {}                    # optional sim-world physics: latency (or calibrated), loss, fifo_links, fsync,
                               # cores per server node, calibration (a `lab calibrate` file, or none)

The values above are an example; a field the file leaves out is the ``Workload`` dataclass's
default for it (the one place the defaults are written), and ``name`` is required.

Arrivals: with ``constant`` each producer is one client that sends at fixed intervals and
waits for each put before the next (OMB's rate limiter: a put that returns late delays the
ones after it, and their ``delay_ns`` says how late). With ``poisson`` a producer stands
for a population of independent clients: each put starts at its scheduled time whether
earlier ones have finished or not (open loop), so the server sees Poisson arrivals however
slowly it answers.

A bad file is a ``WorkloadError`` that names the file, the field and the problem. The
standard set lives in ``lab/workloads/`` (``lab compare`` runs each), the fault scenarios
in ``lab/workloads/scenarios/`` (one per fault family, each with a fault phase, a healed phase and a
``recover_within`` budget: everything acknowledged is to be delivered that long after the
last heal); both are also found by name (``steady``, ``split-one``), standard set first.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

import yaml

from lab.workloads.clients import ClientPlan, parse_clients
from lab.workloads.errors import WorkloadError
from lab.workloads.fault_base import Fault, FieldError
from lab.workloads.faults import parse_fault

ACK_MODES = ("auto", "reliable")
ARRIVALS = ("constant", "poisson")
STANDARD_DIR = Path(__file__).parent
SCENARIO_DIR = Path(__file__).parent / "scenarios"


#: One entry of a fault schedule: its kind's class in lab.workloads.faults (schema in that module).
FaultSpec = Fault


@dataclass(frozen=True)
class Workload:
    name: str
    description: str = ""
    queues: int = 1
    producers: int = 1
    consumers: int = 1
    message_size: int = 100
    rate: float = 0.0
    arrivals: str = "constant"
    duration: float | None = None
    messages: int | None = None
    ack: str = "auto"
    warmup: float = 0.0
    consumer_delay: float = 0.0
    #: what one client does differently from the rest, by node name (``lab.workloads.clients``)
    clients: dict[str, ClientPlan] = field(default_factory=dict)
    #: the clients' reply timeout in seconds: the design's ``timeout`` option unless the run sets it
    timeout: float | None = None
    seed: int = 0
    faults: tuple[FaultSpec, ...] = ()
    #: seconds after the last heal within which every message acknowledged before it is to
    #: be delivered (a liveness budget; None: none set)
    recover_within: float | None = None
    sim: dict[str, Any] = field(default_factory=dict)
    source: str = "<workload>"

    @property
    def reliable(self) -> bool:
        return self.ack == "reliable"

    @property
    def load_seconds(self) -> float | None:
        """When the producers stop, from the start of the run; None if only the run can tell
        (a message count sent as fast as possible)."""
        if self.duration is not None:
            return self.warmup + self.duration
        return self.messages / self.rate if self.messages is not None and self.rate else None

    def scaled(self, factor: float) -> "Workload":
        """The workload ``factor`` times as long: warm-up, duration (or message count, at least
        10), each fault's start and length. Not the recovery budget: how fast a design recovers
        does not scale with the load. Notebooks use it for quick versions of a workload."""
        from dataclasses import replace

        if not factor > 0:
            raise WorkloadError(f"{self.source}: a scale must be a positive number, not {factor!r}")
        if factor == 1.0:
            return self
        changes: dict[str, Any] = {
            "warmup": self.warmup * factor,
            "faults": tuple(replace(f, at=f.at * factor, duration=f.duration * factor,
                                    at_to=None if f.at_to is None else f.at_to * factor) for f in self.faults),
            "clients": {name: plan.scaled(factor) for name, plan in self.clients.items()}}
        if self.duration is not None:
            changes["duration"] = self.duration * factor
        elif self.messages is not None:
            changes["messages"] = max(10, int(self.messages * factor))
        return replace(self, **changes)

    def with_seed(self, seed: int) -> "Workload":
        """The workload as a run with ``seed`` does it: that seed, and each fault whose start
        is a range at the time drawn for the seed (``lab.workloads.nemesis.timed``), so the run's
        manifest holds the times that happened."""
        from dataclasses import replace

        from lab.workloads.nemesis import timed  # the nemesis imports this module

        return replace(self, seed=seed, faults=timed(self.faults, seed))


#: A workload file's fields and what each is when the file leaves it out: the ``Workload``
#: dataclass's own (its one home); ``source`` is where the file came from, not a field of it.
_FIELDS = tuple(f.name for f in dataclasses.fields(Workload) if f.name != "source")
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Workload) if f.default is not dataclasses.MISSING}
_SIM_FIELDS = ("latency", "loss", "fifo_links", "fsync", "cores", "calibration")


def standard_workload_files() -> list[Path]:
    """The standard set's files, by name."""
    return sorted(STANDARD_DIR.glob("*.yaml"))


def scenario_files() -> list[Path]:
    """The fault scenarios' files (``lab/workloads/scenarios/``), by name."""
    return sorted(SCENARIO_DIR.glob("*.yaml"))


def load_workload(path: str | Path) -> Workload:
    """Read and validate a workload file, or a standard workload or scenario given by name
    (``steady``, ``split-one``; the standard set is looked in first)."""
    path = Path(path)
    if not path.exists():
        stem = path.name.removesuffix(".yaml")
        found = next((d / f"{stem}.yaml" for d in (STANDARD_DIR, SCENARIO_DIR) if (d / f"{stem}.yaml").is_file()),
                     None)
        if path.parent != Path(".") or found is None:
            names = ", ".join(p.stem for p in standard_workload_files())
            scenarios = ", ".join(p.stem for p in scenario_files())
            raise WorkloadError(f"{path}: no such workload file, nor a standard workload ({names}) "
                                f"or a scenario ({scenarios})")
        path = found
    if path.is_dir():
        raise WorkloadError(f"{path}: is a directory, not a workload file")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise WorkloadError(f"{path}: not a text file (a workload is YAML)") from None
    except OSError as e:
        raise WorkloadError(f"{path}: cannot read it: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise WorkloadError(f"{path}: not valid YAML: {e}".replace("\n", " ")) from None
    return parse_workload(data, str(path))


def parse_workload(data: Any, source: str = "<workload>") -> Workload:
    """Validate a workload given as a mapping (the parsed YAML)."""

    def fail(name: str, problem: str) -> WorkloadError:
        return WorkloadError(f"{source}: field '{name}': {problem}")

    if not isinstance(data, dict):
        raise WorkloadError(f"{source}: a workload is a mapping of fields, got {type(data).__name__}")
    unknown = sorted(set(map(str, data)) - set(_FIELDS))
    if unknown:
        raise fail(unknown[0], f"unknown field (known: {', '.join(_FIELDS)})")

    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise fail("name", "required, a non-empty string")
    if any(c in name for c in "/\\") or name.startswith("."):
        raise fail("name", f"must not contain path separators, got {name!r}")
    description = data.get("description", _DEFAULTS["description"])
    if not isinstance(description, str) or "\n" in description.strip():
        raise fail("description", "one line of text")

    def optional_integer(key: str, minimum: int) -> int | None:
        value = data.get(key, _DEFAULTS[key])
        if value is None:
            return None
        return integer(key, minimum)

    def integer(key: str, minimum: int) -> int:
        value = data.get(key, _DEFAULTS[key])
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise fail(key, f"must be a whole number >= {minimum}, got {value!r}")
        return value

    def optional_number(key: str, minimum: float, positive: bool = False) -> float | None:
        value = data.get(key, _DEFAULTS[key])
        if value is None:
            return None
        return number(key, minimum, positive)

    def number(key: str, minimum: float, positive: bool = False) -> float:
        value = data.get(key, _DEFAULTS[key])
        if not _is_number(value):
            raise fail(key, f"must be a number, got {value!r}")
        if value < minimum or (positive and value == 0):
            raise fail(key, f"must be {'>' if positive else '>='} {minimum}, got {value!r}")
        return float(value)

    duration = optional_number("duration", 0, positive=True)
    messages = optional_integer("messages", 1)
    if (duration is None) == (messages is None):
        raise fail("duration", "give exactly one of 'duration' (seconds) or 'messages' (a count)")
    ack = data.get("ack", _DEFAULTS["ack"])
    if ack not in ACK_MODES:
        raise fail("ack", f"must be one of {', '.join(ACK_MODES)}, got {ack!r}")
    arrivals = data.get("arrivals", _DEFAULTS["arrivals"])
    if arrivals not in ARRIVALS:
        raise fail("arrivals", f"must be one of {', '.join(ARRIVALS)}, got {arrivals!r}")
    if arrivals == "poisson" and not data.get("rate"):
        raise fail("arrivals", "poisson arrivals need a 'rate' > 0 (their mean)")
    seed = data.get("seed", _DEFAULTS["seed"])
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise fail("seed", f"must be a whole number, got {seed!r}")

    sim = data.get("sim") or {}
    if not isinstance(sim, dict):
        raise fail("sim", f"must be a mapping, got {type(sim).__name__}")
    unknown_sim = sorted(set(map(str, sim)) - set(_SIM_FIELDS))
    if unknown_sim:
        raise fail(f"sim.{unknown_sim[0]}", f"unknown field (known: {', '.join(_SIM_FIELDS)})")

    workload = Workload(
        name=name,
        description=description.strip(),
        queues=integer("queues", 1),
        producers=integer("producers", 1),
        consumers=integer("consumers", 0),
        message_size=integer("message_size", 1),
        rate=number("rate", 0),
        arrivals=arrivals,
        duration=duration,
        messages=messages,
        ack=ack,
        warmup=number("warmup", 0),
        consumer_delay=number("consumer_delay", 0),
        timeout=optional_number("timeout", 0, positive=True),
        seed=seed,
        faults=_parse_faults(data.get("faults") or [], fail),
        recover_within=optional_number("recover_within", 0, positive=True),
        sim=dict(sim),
        source=source,
    )
    clients = parse_clients(data.get("clients"), workload.producers, workload.consumers, workload.queues,
                            workload.load_seconds, fail)
    if clients:
        workload = dataclasses.replace(workload, clients=clients)
    if workload.sim:
        try:
            from models.config import SimConfig

            SimConfig.from_spec(workload.sim)
        except ValueError as e:
            raise fail("sim", str(e)) from None
    if workload.recover_within is not None and not workload.faults:
        raise fail("recover_within", "counts from the last heal: it needs a fault schedule ('faults')")
    end = workload.load_seconds
    for i, fault in enumerate(workload.faults):
        if end is not None and fault.latest >= end:
            when = f"{fault.at:g} s" if fault.at_to is None else f"the range's end, {fault.latest:g} s,"
            raise fail(f"faults[{i}].at", f"{when} is at or past the end of the load ({end:g} s): "
                       "the fault would never start" + ("" if fault.at_to is None else " in some runs"))
    return workload


def _parse_faults(entries: Any, fail) -> tuple[FaultSpec, ...]:
    if not isinstance(entries, list):
        raise fail("faults", f"must be a list of fault entries, got {type(entries).__name__}")
    faults = []
    for i, entry in enumerate(entries):
        try:
            faults.append(parse_fault(entry))
        except FieldError as e:
            raise fail(f"faults[{i}]" + (f".{e.field}" if e.field else ""), e.problem) from None
    return tuple(sorted(faults, key=lambda f: f.at))


def _is_number(value: Any) -> TypeGuard[float]:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
