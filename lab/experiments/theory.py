"""Queueing theory the sim world is checked against: the response time (sojourn: arrival to
the end of service) of M/M/1, M/M/c and M/D/1 queues, first come first served.

Each model gives ``mean()``, ``cdf(t)`` and ``quantile(p)`` of the sojourn time ``T``, in
the units its rates are given in (the tests use seconds). Notation: arrival rate ``lam``
(lambda), service rate ``mu`` (mean service time ``1/mu``), or constant service time ``d``;
``c`` servers; offered load ``a = lam/mu`` and utilisation ``rho = a/c < 1``.

M/M/1 (Kleinrock, *Queueing Systems* Vol. 1, 1975, sec. 3.2; Gross & Harris, *Fundamentals
of Queueing Theory*, 3rd ed., sec. 2.2.4): ``T ~ Exp(mu - lam)``, so
``E[T] = 1/(mu - lam)``, ``P(T <= t) = 1 - exp(-(mu - lam) t)``,
``q_p = -ln(1 - p)/(mu - lam)``.

M/M/c (Erlang C; Gross & Harris sec. 2.3.1, Kleinrock sec. 3.5): an arrival waits with the
Erlang C probability ``C(c, a) = [a^c/c! / (1 - rho)] / [sum_{k<c} a^k/k! + a^c/c! / (1 - rho)]``
(computed here through Erlang B's recursion ``B_0 = 1, B_k = a B_{k-1} / (k + a B_{k-1})``,
``C = c B_c / (c - a (1 - B_c))``, which neither overflows nor cancels); given that it waits,
its wait is ``Exp(gamma)`` with ``gamma = c mu - lam``; its service is an independent
``Exp(mu)``. So ``E[T] = C/gamma + 1/mu`` and

    P(T > t) = (1 - C) e^{-mu t} + C * H(t),   H(t) = P(Exp(gamma) + Exp(mu) > t),

``H`` the hypoexponential survival ``(gamma e^{-mu t} - mu e^{-gamma t}) / (gamma - mu)``,
which is 0/0 at ``gamma == mu`` (e.g. c = 2 at rho = 0.5): with ``m = min, M = max`` of
the two rates it is written ``e^{-m t} (1 + m * (-expm1(-(M - m) t)) / (M - m))``, whose
limit ``(1 + mu t) e^{-mu t}`` (Erlang-2) is taken when ``M == m``; no overflow, no
cancellation. Quantiles by bisection on the CDF (it is continuous and increasing).

M/D/1 (Pollaczek-Khinchine mean: Kleinrock sec. 5.7, Gross & Harris sec. 5.1.1): with
``rho = lam d``, ``E[Wq] = rho d / (2 (1 - rho))`` and ``E[T] = d + E[Wq]``. The waiting
time's distribution is Erlang's, as Crommelin (1932, "Delay probability formulae when the
holding times are constant", P.O. Elec. Eng. J. 25) proved it, in the form of Iversen's
ITU/ITC *Teletraffic Engineering Handbook* (sec. 13.4.2, M/D/1):

    P(Wq <= t) = (1 - rho) * sum_{k=0}^{floor(t/d)} (lam (k d - t))^k / k! * e^{-lam (k d - t)},

and ``P(T <= t) = P(Wq <= t - d)``. The terms alternate in sign and grow like ``e^{lam t}``
while the sum stays in [0, 1], so in floats it cancels catastrophically as ``lam t`` grows
(rho = 0.8: an absolute error of 5e-10 at ``t = 15 d``, 5e-8 at ``20 d`` - a third of the
tail probability it is subtracted from - and 6e-3 at ``30 d``, where the tail is 2e-6; the
wait's p99 is ``10.4 d``, its p99.99 ``21 d``). It is summed here in ``decimal`` with enough digits for the cancellation
(``2 lam t / ln 10`` of them plus 30: no term exceeds ``e^{2 lam t}``): exact to double precision at any ``t``.
``tests/test_queueing_theory.py`` checks it against a Lindley-recursion simulation
(``lindley_waits``) of 4,000,000 customers.

The sample sizes: ``tests/test_queueing_theory.py`` runs each case in the sim world with as
many customers as make three standard errors (measured by batch means) of the mean, p50 and
p99 smaller than their tolerances (3 % and 5 %); its docstring lists them and the SEs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal, localcontext
from typing import Callable

import numpy as np

__all__ = ["MM1", "MMc", "MD1", "erlang_c", "lindley_waits"]


def erlang_c(c: int, a: float) -> float:
    """Erlang C: the probability that an arrival to M/M/c with offered load ``a = lam/mu``
    (``a < c``) waits for a server."""
    if not (isinstance(c, int) and c >= 1):
        raise ValueError(f"c must be a whole number >= 1, got {c!r}")
    if not 0 <= a < c:
        raise ValueError(f"the offered load a must be in [0, c) for a stable queue, got a={a!r}, c={c}")
    b = 1.0  # Erlang B with 0 servers
    for k in range(1, c + 1):
        b = a * b / (k + a * b)
    return c * b / (c - a * (1 - b))


def _quantile(cdf: Callable[[float], float], p: float, scale: float) -> float:
    """The smallest ``t >= 0`` with ``cdf(t) >= p``, by bracketing from ``scale`` up and bisection."""
    if not 0 < p < 1:
        raise ValueError(f"a quantile's p must be in (0, 1), got {p!r}")
    lo, hi = 0.0, scale
    while cdf(hi) < p:
        lo, hi = hi, 2 * hi
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid in (lo, hi):
            break
        if cdf(mid) >= p:
            hi = mid
        else:
            lo = mid
    return hi


def _check_rate(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


@dataclass(frozen=True)
class MM1:
    """M/M/1: Poisson arrivals at ``lam``, one server, exponential service at rate ``mu``."""

    lam: float
    mu: float

    def __post_init__(self) -> None:
        _check_rate("lam", self.lam)
        _check_rate("mu", self.mu)
        if self.lam >= self.mu:
            raise ValueError(f"unstable: rho = lam/mu = {self.lam / self.mu:.3g} >= 1")

    @property
    def rho(self) -> float:
        return self.lam / self.mu

    def mean(self) -> float:
        """``E[T] = 1/(mu - lam)``."""
        return 1 / (self.mu - self.lam)

    def cdf(self, t: float) -> float:
        """``P(T <= t) = 1 - exp(-(mu - lam) t)``."""
        return -math.expm1(-(self.mu - self.lam) * t) if t > 0 else 0.0

    def quantile(self, p: float) -> float:
        """``-ln(1 - p)/(mu - lam)``."""
        if not 0 < p < 1:
            raise ValueError(f"a quantile's p must be in (0, 1), got {p!r}")
        return -math.log1p(-p) / (self.mu - self.lam)


@dataclass(frozen=True)
class MMc:
    """M/M/c: Poisson arrivals at ``lam``, ``c`` servers, exponential service at rate ``mu``."""

    lam: float
    mu: float
    c: int

    def __post_init__(self) -> None:
        _check_rate("lam", self.lam)
        _check_rate("mu", self.mu)
        if not (isinstance(self.c, int) and self.c >= 1):
            raise ValueError(f"c must be a whole number >= 1, got {self.c!r}")
        if self.lam >= self.c * self.mu:
            raise ValueError(f"unstable: rho = lam/(c mu) = {self.lam / (self.c * self.mu):.3g} >= 1")

    @property
    def rho(self) -> float:
        return self.lam / (self.c * self.mu)

    @property
    def wait_probability(self) -> float:
        """Erlang C: ``P(Wq > 0)``."""
        return erlang_c(self.c, self.lam / self.mu)

    def mean(self) -> float:
        """``E[T] = C/(c mu - lam) + 1/mu``."""
        return self.wait_probability / (self.c * self.mu - self.lam) + 1 / self.mu

    def survival(self, t: float) -> float:
        """``P(T > t) = (1 - C) e^{-mu t} + C H(t)`` (the module docstring)."""
        if t <= 0:
            return 1.0
        C = self.wait_probability
        gamma, mu = self.c * self.mu - self.lam, self.mu
        m, M = min(gamma, mu), max(gamma, mu)
        diff = M - m
        h = math.exp(-m * t) * (1 + (m * -math.expm1(-diff * t) / diff if diff > 0 else m * t))
        return (1 - C) * math.exp(-mu * t) + C * h

    def cdf(self, t: float) -> float:
        return 1.0 - self.survival(t)

    def quantile(self, p: float) -> float:
        """By bisection on ``cdf``."""
        return _quantile(self.cdf, p, self.mean())


@dataclass(frozen=True)
class MD1:
    """M/D/1: Poisson arrivals at ``lam``, one server, constant service time ``d``."""

    lam: float
    d: float

    def __post_init__(self) -> None:
        _check_rate("lam", self.lam)
        _check_rate("d", self.d)
        if self.lam * self.d >= 1:
            raise ValueError(f"unstable: rho = lam d = {self.lam * self.d:.3g} >= 1")

    @property
    def rho(self) -> float:
        return self.lam * self.d

    def mean_wait(self) -> float:
        """Pollaczek-Khinchine: ``E[Wq] = rho d / (2 (1 - rho))``."""
        return self.rho * self.d / (2 * (1 - self.rho))

    def mean(self) -> float:
        """``E[T] = d + E[Wq]``."""
        return self.d + self.mean_wait()

    def wait_cdf(self, t: float) -> float:
        """``P(Wq <= t)`` by Crommelin's formula, summed in ``decimal`` (the module docstring)."""
        if t < 0:
            return 0.0
        with localcontext() as ctx:
            ctx.prec = 30 + int(2 * self.lam * t / math.log(10)) + 1  # the terms are below e^{2 lam t}
            lam, d, tt = Decimal(self.lam), Decimal(self.d), Decimal(t)
            total = (lam * tt).exp()  # k = 0
            factorial = Decimal(1)
            for k in range(1, int(t // self.d) + 1):
                factorial *= k
                x = lam * (k * d - tt)  # <= 0
                if x == 0:
                    break  # t is a multiple of d: this term and none after it (there are none)
                total += x ** k / factorial * (-x).exp()
            value = (1 - Decimal(self.rho)) * total
        return min(1.0, max(0.0, float(value)))

    def cdf(self, t: float) -> float:
        """``P(T <= t) = P(Wq <= t - d)``."""
        return self.wait_cdf(t - self.d)

    def quantile(self, p: float) -> float:
        """By bisection on ``cdf`` (``d`` for ``p <= 1 - rho``: the customers who do not wait)."""
        if not 0 < p < 1:
            raise ValueError(f"a quantile's p must be in (0, 1), got {p!r}")
        return self.d + _quantile(self.wait_cdf, p, self.d) if p > 1 - self.rho else self.d


def lindley_waits(gaps: np.ndarray, services: np.ndarray) -> np.ndarray:
    """The waits in queue of a single-server FIFO queue, by Lindley's recursion
    ``W_0 = 0, W_{n+1} = max(0, W_n + S_n - A_{n+1})``, vectorised: with the partial sums
    ``P_n = sum_{i<n} (S_i - A_{i+1})``, ``W_n = P_n - min_{k<=n} P_k``. ``gaps[n]`` is
    ``A_{n+1}``, the time from customer ``n``'s arrival to customer ``n+1``'s; the result has
    one wait per service."""
    gaps = np.asarray(gaps, dtype=np.float64)
    services = np.asarray(services, dtype=np.float64)
    if len(gaps) != len(services) - 1:
        raise ValueError(f"n services need n - 1 gaps, got {len(services)} and {len(gaps)}")
    partial = np.concatenate([[0.0], np.cumsum(services[:-1] - gaps)])
    return partial - np.minimum.accumulate(partial)
