"""The sim world against queueing theory (``lab.experiments.theory``): M/M/1, M/M/c and M/D/1.

The queue: the ideal design in the sim world with ``--option service=exp:50us`` (M/M/c) or
``const:50us`` (M/D/1), ``sim: {latency: {dist: constant, ms: 0}, cores: c}`` (no network
time, ``c`` servers), one open-loop producer (``arrivals: poisson``: each put starts at its
scheduled time whatever the earlier ones are doing) at ``lam = rho c / 50 us`` and
``consumers: 0`` (the server sees the put stream alone; the runner drains the queue after
the load, and those gets are not looked at). Each put's latency is one customer's response
time: arrival to the end of its service. The tests check that every put started on
schedule (``delay_ns == 0``), so the arrivals are the Poisson process asked for, and that
each run's verdict is valid with no inversion of the real-time order (``lab.judge.order``).

What is checked, per case: the mean within 3 % of theory, the p50 and p99 (raw sample
quantiles, numpy's default interpolation) within 5 %, and - part of the acceptance - that
each tolerance is at least three standard errors of its estimate: ``3 SE <= tolerance``.
The response times are autocorrelated (a customer behind a long one waits long too), so
an iid standard error understates theirs several-fold (M/M/1 at rho 0.5: the mean's by a
factor of 3.5, the p99's by 4); the SE is measured by batch means (sectioning): the run's
customers, in arrival order, cut into 20 batches of 4,000 to 240,000 customers, far longer
than the queue's relaxation time (M/M/1: ``1/(mu (1 - sqrt(rho))^2)``: 12 customers at
rho 0.5, 72 at rho 0.8); the statistic computed on each batch; ``SE = sd(batch values) /
sqrt(20)``. The queue starts empty and the first 1,000 customers are discarded (over 14
relaxation times). The slow cases run as independent replications (other seeds) in
parallel processes, each cut into ``20 / replications`` batches, their customers pooled.

Integer nanoseconds: a service time is rounded to the ns (``lab.design.service``), as is each
exponential inter-arrival gap (``lab.experiments.runner``): errors of 0.5 ns on means of 50 us and
more, 1e-5 relative, far below the tolerances.

The sizes (customers simulated per case) and what the batch means measured with them:
3 SE relative to theory, and the sim's error against theory, for the mean, p50 and p99;
seed 1 (replications: seeds 1..k); measured on 2026-11-25 (2 cores):

    case    rho  c       n         3SE mean/p50/p99     error mean/p50/p99     tier
    M/M/1   0.5  1    300k       1.54 / 1.25 / 2.64 %   +0.30 / +0.37 / +0.12 %  fast
    M/M/4   0.5  4     80k       1.87 / 2.04 / 2.28 %   +0.39 / +0.17 / +0.53 %  fast
    M/D/1   0.5  1    160k       0.94 / 1.19 / 2.82 %   +0.03 /  0.00 / +0.00 %  fast
    M/M/2   0.5  2    250k       1.46 / 1.11 / 3.28 %   +0.44 / +0.50 / +0.10 %  slow
    M/M/1   0.8  1  4 x 1.2M     1.03 / 0.90 / 2.41 %   -0.34 / -0.10 / -0.87 %  slow
    M/M/2   0.8  2  4 x 1M       1.18 / 0.91 / 2.52 %   -0.36 / -0.14 / -1.02 %  slow
    M/M/4   0.8  4  2 x 1M       1.20 / 0.87 / 2.19 %   -0.22 / +0.15 / -1.55 %  slow
    M/D/1   0.8  1  2 x 1.2M     0.86 / 0.81 / 2.19 %   +0.10 / +0.13 / -0.59 %  slow

The tolerances are 3 % (mean) and 5 % (quantiles); each 3 SE is at most two thirds of its
tolerance but one (M/M/2's p99 at rho 0.5), so a batch-means SE that is itself some 16 %
uncertain (20 batches) still leaves the check meaningful. The sizes are what the runner's
speed allows today: the fast tier (the three fast cases and the checks of the formulas)
takes about 45 s; the slow tier about 25 minutes (M/M/1 at rho 0.8 10 min, M/M/2 7.5 min,
M/M/4 4 min, M/D/1 2.5 min; replications two at a time). Each run also does as many gets as puts
after the load (the runner drains a ``consumers: 0`` workload's queue to check every put),
work the statistics do not use.
M/D/1 at rho 0.5 has an atom at its median: half the customers do not wait, ``P(T = d) =
1 - rho``, so the theoretical p50 is ``d`` and the sample median is ``d`` or a little above.

The theory itself is checked too: M/M/c with one server is M/M/1, Erlang C against its
textbook formula, each CDF against its mean, the hypoexponential at ``c mu - lam == mu``,
and Crommelin's M/D/1 waiting-time CDF (summed exactly) against a Lindley-recursion
simulation of 4,000,000 customers in numpy, where the naive float sum fails.
"""

from __future__ import annotations

import math
import os
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pytest

from lab.design.options import BadOption
from lab.history.record import read_samples
from lab.experiments.runner import run
from lab.experiments.theory import MD1, MM1, MMc, erlang_c, lindley_waits
from lab.workloads.errors import WorkloadError
from lab.workloads.spec import parse_workload

SERVICE_S = 50e-6  # the mean (exp) or constant service time
BATCHES = 20
SKIP = 1_000  # customers discarded at the start of each run (the queue starts empty)
TOLERANCE = {"mean": 0.03, "p50": 0.05, "p99": 0.05}
STATISTICS = {"mean": np.mean, "p50": lambda x: np.quantile(x, 0.5), "p99": lambda x: np.quantile(x, 0.99)}


@dataclass(frozen=True)
class Case:
    model: str  # "M/M/c" or "M/D/1"
    rho: float
    c: int
    n: int  # customers per replication
    replications: int = 1
    slow: bool = False

    @property
    def lam(self) -> float:
        return self.rho * self.c / SERVICE_S

    @property
    def service(self) -> str:
        return "const:50us" if self.model == "M/D/1" else "exp:50us"

    def theory(self) -> MM1 | MMc | MD1:
        if self.model == "M/D/1":
            return MD1(self.lam, SERVICE_S)
        return MM1(self.lam, 1 / SERVICE_S) if self.c == 1 else MMc(self.lam, 1 / SERVICE_S, self.c)

    def __str__(self) -> str:
        name = self.model.replace("c", str(self.c))
        reps = f"-x{self.replications}" if self.replications > 1 else ""
        return f"{name}-rho{self.rho}-n{self.n}{reps}"


CASES = [
    Case("M/M/c", 0.5, 1, 300_000),
    Case("M/M/c", 0.5, 4, 80_000),
    Case("M/D/1", 0.5, 1, 160_000),
    Case("M/M/c", 0.5, 2, 250_000, slow=True),
    Case("M/M/c", 0.8, 1, 1_200_000, 4, slow=True),
    Case("M/M/c", 0.8, 2, 1_000_000, 4, slow=True),
    Case("M/M/c", 0.8, 4, 1_000_000, 2, slow=True),
    Case("M/D/1", 0.8, 1, 1_200_000, 2, slow=True),
]


def response_times(case: Case, seed: int) -> np.ndarray:
    """One run of ``case``: every customer's response time (s), in arrival order, the first
    ``SKIP`` dropped; checks that every put succeeded and started on schedule."""
    workload = parse_workload({
        "name": "queueing-theory", "producers": 1, "consumers": 0, "rate": case.lam, "arrivals": "poisson",
        "messages": case.n, "warmup": 0, "seed": seed,
        "sim": {"latency": {"dist": "constant", "ms": 0}, "cores": case.c},
    }, f"<{case}>")
    with tempfile.TemporaryDirectory() as tmp:
        result = run(workload, "ideal", "sim", out=Path(tmp) / "run", progress=False,
                     options={"service": case.service})
        v = result.check  # a FIFO with overlapping puts: real-time order holds (lab.judge.order)
        assert v.verdict == "valid" and v.reordering.inversions == 0 and v.counts.ok == case.n, v.line()
        table = read_samples(result.samples_path, columns=["op", "outcome", "t_start_ns", "latency_ns", "delay_ns"])
    puts = table.filter(pc.equal(table["op"], "put"))
    assert puts.num_rows == case.n
    assert pc.all(pc.equal(puts["outcome"], "ok")).as_py()
    assert pc.max(puts["delay_ns"]).as_py() == 0  # every arrival on schedule: open loop
    order = np.argsort(puts["t_start_ns"].to_numpy(), kind="stable")
    return puts["latency_ns"].to_numpy()[order][SKIP:] / 1e9


def estimate(runs: list[np.ndarray]) -> dict[str, tuple[float, float]]:
    """Each statistic of the pooled runs and its standard error by batch means: each run
    cut into ``BATCHES / len(runs)`` consecutive batches, the statistic on each batch."""
    per_run = BATCHES // len(runs)
    batches = [b for r in runs for b in np.array_split(r, per_run)]
    pooled = np.concatenate(runs)
    out = {}
    for name, stat in STATISTICS.items():
        values = np.array([stat(b) for b in batches])
        out[name] = (float(stat(pooled)), float(values.std(ddof=1) / math.sqrt(len(values))))
    return out


def _replication(args: tuple[Case, int]) -> np.ndarray:
    return response_times(*args)


def simulate(case: Case, seed: int = 1) -> list[np.ndarray]:
    """``case.replications`` independent runs (seeds ``seed, seed + 1, ...``), in parallel
    processes when there are several."""
    jobs = [(case, seed + r) for r in range(case.replications)]
    if case.replications == 1:
        return [response_times(*jobs[0])]
    workers = min(case.replications, os.cpu_count() or 1)
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        return list(pool.map(_replication, jobs))


@pytest.mark.parametrize("case", [pytest.param(c, id=str(c), marks=[pytest.mark.slow] if c.slow else [])
                                  for c in CASES])
def test_the_sim_reproduces_queueing_theory(case: Case):
    assert BATCHES % case.replications == 0
    theory = case.theory()
    expected = {"mean": theory.mean(), "p50": theory.quantile(0.5), "p99": theory.quantile(0.99)}
    measured = estimate(simulate(case))
    report = {name: f"theory {expected[name] * 1e6:.2f} us, sim {value * 1e6:.2f} us "
                    f"({value / expected[name] - 1:+.2%}), 3SE {3 * se / expected[name]:.2%}"
              for name, (value, se) in measured.items()}
    print(case, report)
    for name, (value, se) in measured.items():
        tolerance = TOLERANCE[name] * expected[name]
        assert 3 * se <= tolerance, f"{case}: too few customers for the {name}: {report[name]}"
        assert abs(value - expected[name]) <= tolerance, f"{case}: {name}: {report[name]}"


# --- the workload refuses what makes no sense for these checks --------------------------

@pytest.mark.parametrize("world, backend, error", [
    ("live", "ideal", "works in the sim world only"),
    ("sim", "kestrel", "has no option 'service'"),
])
def test_the_service_option_is_refused_where_it_means_nothing(tmp_path, world, backend, error):
    workload = parse_workload({"name": "x", "messages": 1, "consumers": 0, "arrivals": "poisson", "rate": 100})
    with pytest.raises(BadOption, match=error):
        run(workload, backend, world, out=tmp_path / "run", progress=False, options={"service": "exp:50us"})
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("fields, error", [
    ({"sim": {"cores": 0}}, "cores must be a whole number >= 1, got 0"),
    ({"sim": {"cores": 1.5}}, "cores must be a whole number >= 1, got 1.5"),
    ({"sim": {"cores": True}}, "cores must be a whole number >= 1, got True"),
    ({"consumers": -1}, "'consumers': must be a whole number >= 0"),
    ({"arrivals": "poisson", "rate": 0}, "poisson arrivals need a 'rate' > 0"),
])
def test_nonsense_queue_workloads_are_refused_by_field(fields, error):
    with pytest.raises(WorkloadError, match=error):
        parse_workload({"name": "x", "messages": 1, **fields}, "<test>")


# --- the theory itself -------------------------------------------------------------------

def test_mmc_with_one_server_is_mm1():
    one, mmc = MM1(0.7, 1.0), MMc(0.7, 1.0, 1)
    assert mmc.wait_probability == pytest.approx(0.7)
    assert mmc.mean() == pytest.approx(one.mean(), rel=1e-12)
    for t in (0.01, 0.5, 1, 3, 10, 30):
        assert mmc.cdf(t) == pytest.approx(one.cdf(t), rel=1e-12, abs=1e-15)
    for p in (0.01, 0.5, 0.99, 0.9999):
        assert mmc.quantile(p) == pytest.approx(one.quantile(p), rel=1e-9)


@pytest.mark.parametrize("c, a", [(1, 0.5), (2, 1.0), (2, 1.6), (4, 2.0), (4, 3.2), (16, 14.0)])
def test_erlang_c_is_the_textbook_formula(c, a):
    rho = a / c
    top = a ** c / math.factorial(c) / (1 - rho)
    assert erlang_c(c, a) == pytest.approx(top / (sum(a ** k / math.factorial(k) for k in range(c)) + top), rel=1e-12)
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)


def _integral_of_survival(cdf, upper: float, steps: int = 20_000) -> float:
    t = np.linspace(0, upper, steps + 1)
    s = 1 - np.array([cdf(x) for x in t])
    return float(np.sum((s[1:] + s[:-1]) / 2) * (upper / steps))


@pytest.mark.parametrize("model", [MMc(1.0, 1.0, 2), MMc(1.6, 1.0, 2), MMc(3.2, 1.0, 4), MMc(2.0, 1.0, 4),
                                   MD1(0.5, 1.0), MD1(0.8, 1.0)], ids=str)
def test_each_cdf_integrates_to_its_mean(model):
    """E[T] = integral of P(T > t): the CDF and the mean formula agree (Pollaczek-Khinchine
    for M/D/1, whose CDF is Crommelin's)."""
    if isinstance(model, MMc):
        upper = model.quantile(1 - 1e-12)
        assert _integral_of_survival(model.cdf, upper) == pytest.approx(model.mean(), rel=1e-6)
    else:  # T = Wq + d; Wq's CDF (its atom at 0 aside) on a grid of the multiples of d, its kinks
        upper = math.ceil(model.quantile(1 - 1e-10) / model.d) * model.d
        steps = round(upper / model.d) * 40
        assert model.d + _integral_of_survival(model.wait_cdf, upper, steps) == pytest.approx(model.mean(), rel=1e-4)


def test_mmc_is_continuous_where_c_mu_minus_lam_equals_mu():
    """c = 2 at rho = 0.5: the wait's rate equals the service's, the Erlang-2 limit."""
    at = MMc(1.0, 1.0, 2)
    for t in (0.1, 1.0, 5.0):
        erlang2 = (1 + t) * math.exp(-t)
        assert at.survival(t) == pytest.approx((2 / 3) * math.exp(-t) + (1 / 3) * erlang2, rel=1e-14)
        for eps in (1e-12, 1e-8, 1e-5):
            assert MMc(1.0 + eps, 1.0, 2).survival(t) == pytest.approx(at.survival(t), rel=10 * eps + 1e-13)
            assert MMc(1.0 - eps, 1.0, 2).survival(t) == pytest.approx(at.survival(t), rel=10 * eps + 1e-13)


def _naive_md1_wait_cdf(lam: float, d: float, t: float) -> float:
    return (1 - lam * d) * sum((lam * (k * d - t)) ** k / math.factorial(k) * math.exp(-lam * (k * d - t))
                               for k in range(int(t // d) + 1))


def test_the_md1_wait_cdf_is_exact_where_the_float_sum_cancels():
    md1 = MD1(0.8, 1.0)
    assert not 0 <= _naive_md1_wait_cdf(0.8, 1.0, 60.0) <= 1  # floats: garbage
    values = [md1.wait_cdf(t) for t in np.arange(0, 120, 0.5)]
    assert all(0 <= v <= 1 for v in values) and values == sorted(values)
    # the tail is asymptotically exponential: P(Wq > t) ~ K e^{-theta t}, theta > 0 solving
    # lam (e^{theta d} - 1) = theta (Cramer-Lundberg), here theta = 0.43084 / d
    lo, hi = 0.01, 2.0
    for _ in range(100):
        lo, hi = ((lo + hi) / 2, hi) if 0.8 * math.expm1((lo + hi) / 2) < (lo + hi) / 2 else (lo, (lo + hi) / 2)
    theta = lo
    assert theta == pytest.approx(0.43084, abs=1e-5)
    tail = [1 - md1.wait_cdf(t) for t in (30.0, 35.0, 40.0)]
    assert tail[1] / tail[0] == pytest.approx(math.exp(-5 * theta), rel=1e-3)
    assert tail[2] / tail[1] == pytest.approx(math.exp(-5 * theta), rel=1e-3)
    assert md1.wait_cdf(5.0) == pytest.approx(_naive_md1_wait_cdf(0.8, 1.0, 5.0), rel=1e-13)  # small t: they agree


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_the_md1_wait_cdf_matches_a_lindley_simulation(rho):
    """4,000,000 customers of M/D/1 (d = 1) by Lindley's recursion; the empirical P(Wq <= t)
    within 4 batch-means standard errors (20 batches of 200,000) of Crommelin's formula."""
    rng = np.random.default_rng(20)
    n = 4_000_000
    waits = lindley_waits(rng.exponential(1 / rho, n - 1), np.ones(n))[SKIP:]
    md1 = MD1(rho, 1.0)
    for t in (0.0, 0.3, 1.0, 1.7, 3.0, 5.0, 8.0, 12.0, 20.0):
        batches = np.array([np.mean(b <= t) for b in np.array_split(waits, BATCHES)])
        se = batches.std(ddof=1) / math.sqrt(BATCHES)
        assert abs(np.mean(waits <= t) - md1.wait_cdf(t)) <= 4 * se + 1e-6, t
    assert np.mean(waits) == pytest.approx(md1.mean_wait(), rel=0.02)


def test_mm1_matches_a_lindley_simulation():
    rng = np.random.default_rng(21)
    n = 2_000_000
    services = rng.exponential(1.0, n)
    sojourns = (lindley_waits(rng.exponential(1 / 0.8, n - 1), services) + services)[SKIP:]
    mm1 = MM1(0.8, 1.0)
    assert np.mean(sojourns) == pytest.approx(mm1.mean(), rel=0.03)
    for p in (0.5, 0.99):
        assert np.quantile(sojourns, p) == pytest.approx(mm1.quantile(p), rel=0.03)
