"""A run's record: its ``RunResult``, and the files written in its run folder once the
load is over — ``samples.parquet`` with each row's phase set (``write_samples_phased``) and
``manifest.json``: the run's spec written out (``lab.experiments.run_spec``), and what it
found — the fault kinds that started, its verdict, summary and warnings (``write_manifest``).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.experiments.run_spec import RunSpec
from lab.judge.checker import Check
from lab.judge.findings import Verdict
from lab.history.phases import fault_events, phases_at
from lab.history.provenance import machine, versions
from lab.history.record import SAMPLE_SCHEMA, Recorder, write_sample_batches
from lab.design.peer import Peer
from lab.design.world import World
from lab.workloads.spec import Workload

@dataclass
class RunResult:
    run_id: str
    run_dir: Path
    spec: RunSpec  # what ran: resolved once, at the runner's door
    check: Check  # the checker's counts and explanations, and the judgement of them
    summary: dict[str, Any]
    samples: int
    wall_seconds: float
    world_seconds: float
    #: what the run could not do as asked (a fault that never started), for people
    warnings: list[str] = dataclasses.field(default_factory=list)

    @property
    def verdict(self) -> Verdict:
        return self.check.verdict

    @property
    def workload(self) -> Workload:
        return self.spec.workload

    @property
    def backend(self) -> str:
        return self.spec.backend

    @property
    def world(self) -> str:
        return self.spec.world

    @property
    def seed(self) -> int:
        return self.spec.seed

    @property
    def samples_path(self) -> Path:
        return self.run_dir / "samples.parquet"


SPILL_FILE = "samples.spill.arrow"  # the recorder's batches while the run goes on; removed after
#: the sample columns the checker and the one-run summary read
CHECKED_COLUMNS = ("op", "client", "node", "queue", "msg_id", "t_start_ns", "latency_ns", "outcome", "error", "phase",
                   "delay_ns")


def write_samples_phased(recorder: Recorder, path: Path, warmup_end_ns: int, drain_start_ns: int | None) -> int:
    """The recorder's rows to ``path`` a batch at a time, each row's phase set from the run's
    fault rows and the two instants (``lab.history.phases``); the number of rows."""
    events = fault_events(recorder.fault_table())
    index = SAMPLE_SCHEMA.get_field_index("phase")

    def phased():
        for batch in recorder.batches():
            phases = phases_at(batch.column("t_start_ns").to_numpy(zero_copy_only=False), events,
                               warmup_end_ns, drain_start_ns)
            yield batch.set_column(index, SAMPLE_SCHEMA.field(index), phases)

    return write_sample_batches(phased(), path)


def write_manifest(result: RunResult, world: World) -> None:
    """The run folder's manifest.json: the run's spec written out, and what the run found."""
    facts = result.check.facts
    manifest = {
        "run_id": result.run_id,
        **result.spec.manifest(),
        "fault_kinds": list(facts.faults) if facts is not None else [],  # those that started (lab.judge.verdict)
        "samples": result.samples,
        "wall_seconds": round(result.wall_seconds, 3),
        "world_seconds": round(result.world_seconds, 6),
        "verdict": result.check.to_dict(),
        "warnings": result.warnings,
        "summary": result.summary,
        "versions": versions(),
        "machine": machine(),
    }
    design = result.spec.design
    if issubclass(design, Peer):  # a real broker (its is_peer): which build the verdict is about
        manifest["broker"] = {"package": design.package, "version": design.version()}
    from lab.experiments import planting

    if planting.planted_now is not None:  # a planted bug's run: never mistaken for the design's own
        manifest["mutant"] = planting.planted_now
    manifest.update(world.recorded())  # the sim: its network's counts
    (result.run_dir / "manifest.json").write_text(json.dumps(_plain(manifest), indent=2, allow_nan=False) + "\n")


def _plain(value: Any) -> Any:
    """JSON-ready: NaN becomes null, tuples lists."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and value != value:
        return None
    return value
