"""Fitting and writing a calibration: each request kind's service time from its measured
samples (``fit_kind``, ``fit``: a cost per request byte from the difference of the two
sizes' medians where it is clearly above the noise, the rest a lognormal or a constant),
the loopback's one-way latency from round trips (``fit_network``), and ``Calibration``,
which writes them as ``lab.design.service``'s calibration file. ``lab.experiments.calibrate``
measures what these fit.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import yaml

from lab.worlds.inprocess import Sample
from lab.design.service import ServiceModel, ServiceTime

SIZES = (100, 4000)  # message bytes: two sizes, so a cost per byte can be fitted
MIN_LOGNORMAL = 10  # fewer samples of a kind: a constant
MIN_PER_BYTE = 8  # samples per size before a per-byte cost is fitted
NOISE_SE = 3.0  # a per-byte cost only where the medians differ by this many standard errors
FLOOR_NS = 100  # no request costs less than this once its per-byte part is taken away


@dataclass(frozen=True)
class KindFit:
    kind: str
    n: int
    service: ServiceTime


@dataclass
class Calibration:
    """One design's measured service times and loopback latency, ready to write."""

    design: str
    fits: dict[str, KindFit]
    network: dict[str, Any] | None
    measured: dict[str, Any] = field(default_factory=dict)
    transport_ns: float = 0.0  # the server process's CPU per round trip beyond the handler's
    client: ServiceTime | None = None  # the load generator's CPU per round trip
    fsync: dict[str, Any] | None = None  # the machine's fsync latency

    def model(self, source: str = "<lab calibrate>") -> ServiceModel:
        return ServiceModel.from_dict(self.to_dict(), source)

    def to_dict(self) -> dict[str, Any]:
        services = {}
        for kind, fit in sorted(self.fits.items()):
            services[kind] = {**fit.service.to_dict(), "n": fit.n}
        out: dict[str, Any] = {"design": self.design, "measured": self.measured, "cores": 1, "services": services}
        if self.transport_ns:
            out["transport_us"] = round(self.transport_ns / 1e3, 3)
        if self.client is not None:
            out["client"] = self.client.to_dict()
        if self.network is not None:
            out["network"] = self.network
        if self.fsync is not None:
            out["fsync"] = self.fsync
        return out

    def write(self, path: str | Path) -> None:
        header = (f"# Service times of {self.design}'s requests, written by `lab calibrate {self.design}`"
                  f" ({self.measured.get('date', '')}).\n"
                  "# services: per request kind as the sim world names it, the CPU time a server node spends on\n"
                  "# it, measured in process: a lognormal (median us, sigma) or a const, plus per_byte_ns per\n"
                  "# request byte; n requests measured. transport_us: the live server's CPU per request\n"
                  "# beyond its handler's (sockets, event loop). client: the load generator's CPU per round\n"
                  "# trip. network: the protocol's loopback one-way latency, less both. fsync: the machine's.\n"
                  "# client, network and fsync are used where a workload says sim: {latency: calibrated}.\n"
                  "# Measure again: lab calibrate "
                  f"{self.design} --out FILE\n")
        text = yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True)
        self.model(str(path))  # refuse to write what would not load
        Path(path).write_text(header + text)

    def table(self) -> str:
        rows = [("kind", "n", "median µs", "sigma", "per-byte ns")]
        for kind, fit in sorted(self.fits.items()):
            st = fit.service
            rows.append((kind, str(fit.n), f"{st.scale_ns / 1e3:.2f}", f"{st.sigma:.2f}" if st.dist == "lognormal"
                         else st.dist, f"{st.per_byte_ns:.3f}" if st.per_byte_ns else "-"))
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
                 for r in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        if self.transport_ns or self.client is not None:
            lines.append(f"server transport: {self.transport_ns / 1e3:.1f} µs per request; load generator: "
                         f"{self.client.scale_ns / 1e3 if self.client else 0:.1f} µs per round trip (median)")
        if self.fsync is not None:
            lines.append(f"fsync: lognormal, median {self.fsync['ms'] * 1e3:.0f} µs, sigma {self.fsync['sigma']:.2f}")
        if self.network is not None:
            shape = f", sigma {self.network['sigma']:.2f}" if "sigma" in self.network else ""
            lines.append(f"network one-way: {self.network['dist']}, median {self.network['ms'] * 1e3:.1f} µs{shape} "
                         f"({self.measured.get('network_probe', {}).get('probe')})")
        else:
            lines.append("network one-way: not measured")
        return "\n".join(lines)


def sigma_of(values: Sequence[float]) -> float:
    """A spread from the interquartile range, as a normal's sigma (IQR / 1.349)."""
    if len(values) < 4:
        return 0.0
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return (q3 - q1) / 1.349


def _median_se(values: Sequence[float]) -> float:
    """The standard error of a sample median (1.2533 sigma / sqrt n, sigma from the IQR)."""
    return 1.2533 * sigma_of(values) / math.sqrt(len(values)) if values else math.inf


def fit_kind(kind: str, samples: list[Sample], phases: tuple[str, str]) -> KindFit:
    """One kind's service time from its samples (``phases``: the small and the large size's)."""
    small = [s for s in samples if s.phase == phases[0]]
    large = [s for s in samples if s.phase == phases[1]]
    per_byte = 0.0
    if len(small) >= MIN_PER_BYTE and len(large) >= MIN_PER_BYTE:
        bytes_small = statistics.median(s.nbytes for s in small)
        bytes_large = statistics.median(s.nbytes for s in large)
        if bytes_large - bytes_small >= (SIZES[1] - SIZES[0]) / 2:  # the request carries the message
            ns_small, ns_large = [s.ns for s in small], [s.ns for s in large]
            difference = statistics.median(ns_large) - statistics.median(ns_small)
            noise = math.hypot(_median_se(ns_small), _median_se(ns_large))
            if difference > NOISE_SE * noise:
                per_byte = difference / (bytes_large - bytes_small)
    rest = [max(float(FLOOR_NS), s.ns - per_byte * s.nbytes) for s in samples]
    median = statistics.median(rest)
    if len(rest) < MIN_LOGNORMAL:
        return KindFit(kind, len(rest), ServiceTime("const", median, 0.0, per_byte))
    return KindFit(kind, len(rest), ServiceTime("lognormal", median, sigma_of([math.log(v) for v in rest]), per_byte))


def _lognormal(values: list[float]) -> ServiceTime:
    """A lognormal by the median and the logs' interquartile range."""
    return ServiceTime("lognormal", statistics.median(values), sigma_of([math.log(v) for v in values]))


def fit(samples: list[Sample], phases: tuple[str, str], warmup: str = "warmup") -> dict[str, KindFit]:
    """Every kind of the measured ``phases``; and a kind seen only in the ``warmup`` (a
    set-up request made once, as creating the account), as the constant its median gives."""
    by_kind: dict[str, list[Sample]] = {}
    for s in samples:
        if s.phase in phases:
            by_kind.setdefault(s.kind, []).append(s)
    fits = {kind: fit_kind(kind, group, phases) for kind, group in by_kind.items()}
    once: dict[str, list[Sample]] = {}
    for s in samples:
        if s.phase == warmup and s.kind not in by_kind:
            once.setdefault(s.kind, []).append(s)
    for kind, group in once.items():
        fits[kind] = KindFit(kind, len(group), ServiceTime("const", max(float(FLOOR_NS),
                                                                        statistics.median(s.ns for s in group))))
    return dict(sorted(fits.items()))


def fit_network(round_trips_ns: list[int], cpu_ns: float) -> dict[str, Any]:
    """The one-way latency: half of what is left of each round trip once the CPU a round
    trip costs (``cpu_ns``: client and server, under load) is taken away — the wire, and the
    wake-ups of idle event loops — as a lognormal (ms) fitted to the median and the 99th
    percentile, the two figures a sim is held to; where nothing is left, a constant 1 µs."""
    left = sorted(max(1000.0, (rtt - cpu_ns) / 2) for rtt in round_trips_ns)
    median = statistics.median(left)
    p99 = left[min(len(left) - 1, round(0.99 * (len(left) - 1)))]
    if median <= 1000.0:
        return {"dist": "constant", "ms": 0.001}
    sigma = max(0.0, math.log(p99 / median) / 2.3263)  # z of the 99th percentile
    return {"dist": "lognormal", "ms": round(median / 1e6, 5), "sigma": round(sigma, 4)}
