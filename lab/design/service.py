"""Service-time models: how long a design's node holds a CPU core for each kind of request.

A model is a table of request kind -> ``ServiceTime`` (a distribution for the constant part,
plus a part per request byte), with an optional default for kinds the table lacks, the
cores a node has, and the one-way latency of the protocol's loopback round trip. It is
read from and written to a calibration file (YAML): ``lab calibrate`` measures one, each
design commits its default as ``lab/backends/<design>/calibration.yaml``, and ``lab run
--calibration FILE`` picks another. The sim world's CPU (``models.cpu``) draws from it;
nothing here knows SimPy, so the calibration (live, in-process) and the sim share it.

A request's kind is named the same way where it is measured and where it is simulated:
a stream request by its connection's ``request_kind`` (a memcache command, an HTTP route),
a node-to-node message by its type's name.

Spec strings, as the ideal design's ``service`` option takes them: ``const:50us``,
``exp:50us`` (the mean), ``lognormal:50us:0.5`` (the median and the shape sigma); units
ns, us, ms, s.
"""

from __future__ import annotations

import inspect
import math
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

import yaml

if TYPE_CHECKING:
    import random  # a draw's source is the caller's: the world's seeded stream

DISTRIBUTIONS = ("const", "exp", "lognormal")
_NV_MAGICCONST = 4 * math.exp(-0.5) / math.sqrt(2.0)  # random.NV_MAGICCONST
_log, _exp = math.log, math.exp


def lognormal(draw: Callable[[], float], mu: float, sigma: float) -> float:
    """``random.Random.lognormvariate(mu, sigma)`` with ``draw`` its ``random``, in one call
    instead of two: the same draws and the same value (Kinderman and Monahan's normal, as
    ``random.normalvariate``). Every simulated request, frame and fsync draws one."""
    while True:
        u1 = draw()
        u2 = 1.0 - draw()
        z = _NV_MAGICCONST * (u1 - 0.5) / u2
        if z * z / 4.0 <= -_log(u2):
            return _exp(mu + z * sigma)


_UNITS = {"ns": 1.0, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ns|us|µs|ms|s)\s*$")


class ServiceModelError(ValueError):
    """A service-time spec or calibration file that cannot be used; the message says why."""


@dataclass(frozen=True)
class ServiceTime:
    """One kind of request's service time: ``dist`` of scale ``scale_ns`` (const: the value;
    exp: the mean; lognormal: the median, with shape ``sigma``), plus ``per_byte_ns`` for each
    byte of the request."""

    dist: str
    scale_ns: float
    sigma: float = 0.0
    per_byte_ns: float = 0.0

    def __post_init__(self) -> None:
        if self.dist not in DISTRIBUTIONS:
            raise ServiceModelError(f"service dist must be one of {', '.join(DISTRIBUTIONS)}, got {self.dist!r}")
        for name in ("scale_ns", "sigma", "per_byte_ns"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ServiceModelError(f"service {name} must be a finite number >= 0, got {value!r}")
        if self.dist == "lognormal" and self.scale_ns <= 0:
            raise ServiceModelError("a lognormal service time needs a median > 0")

    @cached_property
    def _mu(self) -> float:
        """Lognormal's mu, once (not a field: equality and repr stay the parameters')."""
        return math.log(self.scale_ns) if self.dist == "lognormal" else 0.0

    def sample_ns(self, rng: "random.Random", nbytes: int = 0) -> int:
        if self.dist == "lognormal":
            return round(lognormal(rng.random, self._mu, self.sigma) + self.per_byte_ns * nbytes)
        if self.dist == "const":
            ns = self.scale_ns
        else:
            ns = rng.expovariate(1.0 / self.scale_ns) if self.scale_ns > 0 else 0.0
        return round(ns + self.per_byte_ns * nbytes)

    @property
    def mean_ns(self) -> float:
        """The mean of the constant part."""
        if self.dist == "lognormal":
            return self.scale_ns * math.exp(self.sigma ** 2 / 2)
        return self.scale_ns

    @classmethod
    def parse(cls, spec: str) -> "ServiceTime":
        """``const:50us``, ``exp:50us`` or ``lognormal:50us:0.5``."""
        if not isinstance(spec, str):
            raise ServiceModelError(f"a service time is a string such as exp:50us, got {spec!r}")
        parts = spec.split(":")
        dist = parts[0].strip()
        shapes = {"const": 2, "exp": 2, "lognormal": 3}
        if dist not in shapes or len(parts) != shapes[dist]:
            raise ServiceModelError(f"service time {spec!r}: use const:50us, exp:50us or lognormal:50us:0.5")
        scale = parse_duration_ns(parts[1])
        sigma = 0.0
        if dist == "lognormal":
            try:
                sigma = float(parts[2])
            except ValueError:
                raise ServiceModelError(f"service time {spec!r}: sigma {parts[2]!r} is not a number") from None
        return cls(dist, scale, sigma)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"dist": self.dist, "us": round(self.scale_ns / 1e3, 4)}
        if self.dist == "lognormal":
            out["sigma"] = round(self.sigma, 4)
        if self.per_byte_ns:
            out["per_byte_ns"] = round(self.per_byte_ns, 5)
        return out

    @classmethod
    def from_dict(cls, data: Any, where: str) -> "ServiceTime":
        if not isinstance(data, Mapping):
            raise ServiceModelError(f"{where}: a service time is a mapping like {{dist: lognormal, us: 20, sigma: 0.3}}")
        unknown = set(data) - {"dist", "us", "sigma", "per_byte_ns", "n"}
        if unknown:
            raise ServiceModelError(f"{where}: unknown field(s) {', '.join(sorted(map(str, unknown)))}")
        if "us" not in data or "dist" not in data:
            raise ServiceModelError(f"{where}: needs dist and us")
        try:
            return cls(data["dist"], _number(data["us"], where) * 1e3, _number(data.get("sigma", 0.0), where),
                       _number(data.get("per_byte_ns", 0.0), where))
        except ServiceModelError as e:
            raise ServiceModelError(f"{where}: {e}") from None


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ServiceModelError(f"{where}: {value!r} is not a number")
    return float(value)


def parse_duration_ns(text: str) -> float:
    match = _DURATION.match(text)
    if match is None:
        raise ServiceModelError(f"{text!r} is not a duration such as 50us, 1.5ms or 200ns")
    return float(match.group(1)) * _UNITS[match.group(2)]


@dataclass(frozen=True)
class ServiceModel:
    """A design's service times per request kind, as one calibration file holds them."""

    kinds: Mapping[str, ServiceTime] = field(default_factory=dict)
    #: the service time of a kind the table lacks (None: such requests cost no CPU time)
    default: ServiceTime | None = None
    #: cores per server node (a workload's ``sim: cores`` overrides it)
    cores: int = 1
    #: the protocol's loopback one-way latency, as ``models.latency.LatencyModel`` fields
    #: (used where a workload asks for ``sim: {latency: calibrated}``)
    network: Mapping[str, Any] | None = None
    #: a server's CPU per request it receives beyond the handler's: its sockets, event loop
    #: and framing (measured live: the server process's CPU per round trip, less the handler's)
    transport_ns: float = 0.0
    #: the load generator's CPU per round trip (client code, and the live world's link
    #: proxies), one core shared by every client; used with ``sim: {latency: calibrated}``,
    #: where the sim stands for this machine's loopback set-up
    client: ServiceTime | None = None
    #: the machine's fsync latency, as ``LatencyModel`` fields (``sim: {latency: calibrated}``
    #: uses it too, unless the workload gives its own ``fsync``)
    fsync: Mapping[str, Any] | None = None
    #: where, when and how it was measured, for people
    measured: Mapping[str, Any] = field(default_factory=dict)
    source: str = "<service model>"

    def for_kind(self, kind: str) -> ServiceTime | None:
        return self.kinds.get(kind, self.default)

    @classmethod
    def uniform(cls, service: ServiceTime, source: str) -> "ServiceModel":
        """Every request kind takes ``service`` (the ideal design's ``service`` option)."""
        return cls({}, service, source=source)

    @classmethod
    def load(cls, path: str | Path) -> "ServiceModel":
        path = Path(path)
        try:
            data = yaml.safe_load(path.read_text())
        except OSError as e:
            raise ServiceModelError(f"{path}: {e.strerror or e}") from None
        except yaml.YAMLError as e:
            raise ServiceModelError(f"{path}: not YAML ({str(e).splitlines()[0]})") from None
        return cls.from_dict(data, str(path))

    @classmethod
    def from_dict(cls, data: Any, source: str) -> "ServiceModel":
        if not isinstance(data, Mapping):
            raise ServiceModelError(f"{source}: a calibration file is a mapping with 'services'")
        unknown = set(data) - {"design", "measured", "cores", "services", "default", "network", "transport_us", "client",
                          "fsync"}
        if unknown:
            raise ServiceModelError(f"{source}: unknown field(s) {', '.join(sorted(map(str, unknown)))}")
        services = data.get("services") or {}
        if not isinstance(services, Mapping):
            raise ServiceModelError(f"{source}: 'services' maps request kinds to service times")
        kinds = {str(kind): ServiceTime.from_dict(spec, f"{source}: services.{kind}") for kind, spec in services.items()}
        default = data.get("default")
        cores = data.get("cores", 1)
        if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
            raise ServiceModelError(f"{source}: cores must be a whole number >= 1, got {cores!r}")
        network = data.get("network")
        if network is not None and not isinstance(network, Mapping):
            raise ServiceModelError(f"{source}: network is a latency mapping like {{dist: lognormal, ms: 0.02, sigma: 0.3}}")
        transport = data.get("transport_us", 0.0)
        if isinstance(transport, bool) or not isinstance(transport, (int, float)) or not math.isfinite(transport) \
                or transport < 0:
            raise ServiceModelError(f"{source}: transport_us must be a number of microseconds >= 0, got {transport!r}")
        client = data.get("client")
        fsync = data.get("fsync")
        if fsync is not None and not isinstance(fsync, Mapping):
            raise ServiceModelError(f"{source}: fsync is a latency mapping like {{dist: lognormal, ms: 0.5, sigma: 0.3}}")
        return cls(kinds, None if default is None else ServiceTime.from_dict(default, f"{source}: default"),
                   cores=cores, network=dict(network) if network else None, measured=dict(data.get("measured") or {}),
                   source=source, transport_ns=float(transport) * 1e3,
                   client=None if client is None else ServiceTime.from_dict(client, f"{source}: client"),
                   fsync=dict(fsync) if fsync else None)

    def to_dict(self, design: str) -> dict[str, Any]:
        out: dict[str, Any] = {"design": design, "measured": dict(self.measured), "cores": self.cores}
        if self.default is not None:
            out["default"] = self.default.to_dict()
        out["services"] = {kind: st.to_dict() for kind, st in sorted(self.kinds.items())}
        if self.transport_ns:
            out["transport_us"] = round(self.transport_ns / 1e3, 3)
        if self.client is not None:
            out["client"] = self.client.to_dict()
        if self.network:
            out["network"] = dict(self.network)
        if self.fsync:
            out["fsync"] = dict(self.fsync)
        return out

    def dump(self, path: str | Path, design: str, header: str = "") -> None:
        text = yaml.safe_dump(self.to_dict(design), sort_keys=False, allow_unicode=True)
        Path(path).write_text((header if header.endswith("\n") or not header else header + "\n") + text)


def request_kind(connection: Any, request: Any) -> str:
    """A stream request's kind: its connection names it (``request_kind``), else its type."""
    name = getattr(connection, "request_kind", None)
    return name(request) if name is not None else type(request).__name__


def message_kind(payload: Any) -> str:
    """A node-to-node message's kind: its type's name."""
    return type(payload).__name__


def message_bytes(payload: Any) -> int:
    """The bytes a message carries that its handler touches: its body, where it has one."""
    body = getattr(payload, "body", None)
    return len(body) if isinstance(body, (bytes, bytearray, str)) else 0


@dataclass(frozen=True)
class Cpu:
    """How the sim world charges a design's requests CPU time, declared apart from its
    driver: a calibration file beside the driver's module (``lab calibrate`` writes it), and
    the server nodes whose requests cost none because the sim models them otherwise
    (CassieQ's simulated Cassandra). A design whose options name its service times
    overrides ``model``."""

    #: the committed calibration's file name, beside the module that defines the Backend
    calibration: str = "calibration.yaml"
    #: server nodes that cost no CPU time in the sim
    free: tuple[str, ...] = ()

    def path(self, design: type) -> Path | None:
        """Where ``design``'s committed calibration lives; None for a design defined outside a file."""
        try:
            where = inspect.getfile(design)
        except (TypeError, OSError):  # defined outside a file: a notebook cell, a test's type()
            return None
        return Path(where).parent / self.calibration

    def model(self, design: type, options: Mapping[str, Any]) -> ServiceModel | None:
        """The sim world's service times for ``design``'s requests under ``options``
        (checked): its committed calibration, or None (no CPU model) where it has none. A run
        resolves it once, at its door (``lab.experiments.run_spec``)."""
        path = self.path(design)
        return ServiceModel.load(path) if path is not None and path.exists() else None

    def nodes(self, server_nodes: list[str]) -> list[str]:
        """Of ``server_nodes``, those whose requests cost CPU time in the sim."""
        return [n for n in server_nodes if n not in self.free]
