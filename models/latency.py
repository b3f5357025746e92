"""A one-way delay distribution: the ``LatencyModel`` the sim world's links and disks draw from.

The network draws a message's delay from it, the disk an fsync's, and a workload's ``sim``
mapping names one (``latency``, ``fsync``); it stands below all three so none of them imports
another for it.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from lab.design.service import lognormal

_DISTRIBUTIONS = ("constant", "uniform", "exponential", "lognormal")


@dataclass(frozen=True)
class LatencyModel:
    """A one-way delay distribution, in milliseconds (Maelstrom's menu, plus lognormal).

    constant: ``ms``; uniform: ``low_ms``..``high_ms``; exponential: ``min_ms`` + Exp(``mean_ms``);
    lognormal: median ``ms`` and shape ``sigma`` (a realistic datacenter tail).
    """

    dist: str = "lognormal"
    ms: float = 0.1
    sigma: float = 0.5
    low_ms: float = 0.0
    high_ms: float = 0.0
    mean_ms: float = 0.0
    min_ms: float = 0.0

    def __post_init__(self) -> None:
        if self.dist not in _DISTRIBUTIONS:
            raise ValueError(f"latency dist must be one of {', '.join(_DISTRIBUTIONS)}, got {self.dist!r}")
        for name in ("ms", "sigma", "low_ms", "high_ms", "mean_ms", "min_ms"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or value < 0 or math.isnan(value):
                raise ValueError(f"latency {name} must be a number >= 0, got {value!r}")
        if self.dist == "uniform" and self.high_ms < self.low_ms:
            raise ValueError("latency high_ms must be >= low_ms")

    @cached_property
    def _mu(self) -> float:
        """Lognormal's mu, once (not a field: equality and repr stay the parameters')."""
        return math.log(self.ms) if self.dist == "lognormal" and self.ms > 0 else 0.0

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> "LatencyModel":
        unknown = set(spec) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown latency field(s): {', '.join(sorted(unknown))}")
        return cls(**spec)

    def sample_ns(self, rng: random.Random) -> int:
        if self.dist == "lognormal" and self.ms > 0:
            return round(lognormal(rng.random, self._mu, self.sigma) * 1_000_000)
        if self.dist == "constant":
            ms = self.ms
        elif self.dist == "uniform":
            ms = rng.uniform(self.low_ms, self.high_ms)
        elif self.dist == "exponential":
            ms = self.min_ms + (rng.expovariate(1.0 / self.mean_ms) if self.mean_ms > 0 else 0.0)
        else:
            ms = rng.lognormvariate(math.log(self.ms), self.sigma) if self.ms > 0 else 0.0
        return round(ms * 1_000_000)
