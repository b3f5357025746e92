"""The sim world's physical parameters: ``SimConfig``, and its reading from a workload's ``sim`` mapping.

Link latency and loss, FIFO links, the disk's fsync latency, and the server nodes' CPU (a
calibration's service times and cores). ``models.world`` makes a world of one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lab.design.service import ServiceModel
from models.disk import DiskModel
from models.latency import LatencyModel


@dataclass
class SimConfig:
    """The world's physical parameters (all overridable per run)."""

    latency: LatencyModel = field(default_factory=LatencyModel)
    loss: float = 0.0  # probability that a message is dropped
    fifo_links: bool = True  # messages on one (src, dst) link arrive in order, as over TCP
    disk: DiskModel = field(default_factory=DiskModel)
    #: server nodes' CPU: False for none; else the service times of ``service`` — a run's
    #: calibration, which the runner resolves and loads once, at its door
    #: (``lab.experiments.run_spec``), and sets here; None: no CPU model
    cpu: bool = True
    service: ServiceModel | None = None
    cores: int | None = None  # cores per server node (None: the calibration's)
    latency_calibrated: bool = False  # links take the calibration's loopback latency (and its fsync)
    fsync_given: bool = False  # the workload set the fsync latency itself

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> "SimConfig":
        """From a workload's ``sim`` mapping: latency (a mapping, or ``calibrated``), loss,
        fifo_links, fsync, cores, calibration (a file, or ``none`` for no CPU model: checked
        for its type here, loaded by the run's spec)."""
        config = cls()
        if spec.get("latency") == "calibrated":
            config.latency_calibrated = True
        elif "latency" in spec:
            config.latency = LatencyModel.from_spec(_mapping(spec["latency"], "latency"))
        if "cores" in spec:
            cores = spec["cores"]
            if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
                raise ValueError(f"cores must be a whole number >= 1, got {cores!r}")
            config.cores = cores
        if "calibration" in spec:
            calibration = spec["calibration"]
            if not (isinstance(calibration, str) and calibration):
                raise ValueError(f"calibration must be a calibration file or none, got {calibration!r}")
        if "fsync" in spec:
            config.disk = DiskModel(fsync=LatencyModel.from_spec(_mapping(spec["fsync"], "fsync")))
            config.fsync_given = True
        if "loss" in spec:
            loss = spec["loss"]
            if isinstance(loss, bool) or not isinstance(loss, (int, float)) or not 0 <= loss < 1:
                raise ValueError(f"loss must be a probability in [0, 1), got {loss!r}")
            config.loss = float(loss)
        if "fifo_links" in spec:
            if not isinstance(spec["fifo_links"], bool):
                raise ValueError(f"fifo_links must be true or false, got {spec['fifo_links']!r}")
            config.fifo_links = spec["fifo_links"]
        return config


def _mapping(value: Any, name: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be a mapping like {{dist: lognormal, ms: 0.1, sigma: 0.5}}, got {value!r}")
    return value
