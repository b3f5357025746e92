"""Kestrel's configuration: server-wide options, per-queue options and their inheritance.

Option names are the original's (``maxItems``, ``syncJournal`` ...), read from a TOML file:

    queuePath = "data"
    maxOpenTransactions = 100
    [default]            # every queue
    syncJournal = "100ms"
    [queues.weather_updates]
    maxItems = 1500000
    maxAge = "1800s"
    [aliases]
    wx_updates = ["weather_updates"]

A queue's configuration resolves built-in -> ``default`` -> its master (for a fanout child
``a+b``: ``a``'s resolved configuration) -> its own section; only options a level sets
override the level above.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
MB = 1024 * 1024


class ConfigError(ValueError):
    """A configuration file or value the server cannot use."""


_UNITS = {"ms": 0.001, "msec": 0.001, "milliseconds": 0.001, "s": 1.0, "sec": 1.0, "second": 1.0,
          "seconds": 1.0, "min": 60.0, "minute": 60.0, "minutes": 60.0, "h": 3600.0, "hour": 3600.0,
          "hours": 3600.0, "d": 86400.0, "day": 86400.0, "days": 86400.0}
_SIZE_UNITS = {"": 1, "b": 1, "kb": 1024, "k": 1024, "mb": MB, "m": MB, "gb": 1024 * MB, "g": 1024 * MB}


def parse_duration(value: Any, option: str) -> float | None:
    """Seconds from ``"100ms"``, ``"1 second"``, ``"never"`` (None) or a number of seconds."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("never", "none", "")):
        return None
    if isinstance(value, bool):
        raise ConfigError(f"{option}: {value!r} is not a duration")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([a-z]*)\s*", str(value).lower())
        if not m or m.group(2) not in _UNITS and m.group(2) != "":
            raise ConfigError(f"{option}: {value!r} is not a duration (use e.g. \"100ms\", \"30s\", \"never\")")
        seconds = float(m.group(1)) * _UNITS.get(m.group(2), 1.0)
    if seconds < 0:
        raise ConfigError(f"{option}: a duration cannot be negative ({value!r})")
    return seconds


def parse_size(value: Any, option: str) -> int:
    """Bytes from an integer or ``"16MB"``-style text."""
    if isinstance(value, bool):
        raise ConfigError(f"{option}: {value!r} is not a size")
    if isinstance(value, int):
        n = value
    else:
        m = re.fullmatch(r"\s*([0-9]+)\s*([a-z]*)\s*", str(value).lower())
        if not m or m.group(2) not in _SIZE_UNITS:
            raise ConfigError(f"{option}: {value!r} is not a size (use bytes, or e.g. \"16MB\")")
        n = int(m.group(1)) * _SIZE_UNITS[m.group(2)]
    if n < 0:
        raise ConfigError(f"{option}: a size cannot be negative ({value!r})")
    return n


def _count(value: Any, option: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{option}: {value!r} is not a whole number >= 0")
    return value


def _flag(value: Any, option: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{option}: {value!r} is not true or false")
    return value


def _name(value: Any, option: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{option}: {value!r} is not a queue name")
    return value


@dataclass(frozen=True)
class QueueConfig:
    """One queue's resolved options (the original's defaults; times in seconds)."""

    max_items: int = INT_MAX
    max_size: int = LONG_MAX
    max_item_size: int = LONG_MAX
    max_age: float | None = None
    default_journal_size: int = 16 * MB
    max_memory_size: int = 128 * MB
    max_journal_size: int = 1024 * MB
    min_journal_compact_delay: float | None = 60.0
    discard_old_when_full: bool = False
    keep_journal: bool = True
    sync_journal: float | None = None  # None: never fsync; 0: every write; P: every P seconds
    expire_to_queue: str | None = None
    max_expire_sweep: int = INT_MAX
    fanout_only: bool = False
    max_queue_age: float | None = None
    disable_aggressive_rewrites: bool = False
    open_transaction_timeout: float | None = None


# file name -> (field, parser)
QUEUE_OPTIONS: dict[str, tuple[str, Any]] = {
    "maxItems": ("max_items", _count),
    "maxSize": ("max_size", parse_size),
    "maxItemSize": ("max_item_size", parse_size),
    "maxAge": ("max_age", parse_duration),
    "defaultJournalSize": ("default_journal_size", parse_size),
    "maxMemorySize": ("max_memory_size", parse_size),
    "maxJournalSize": ("max_journal_size", parse_size),
    "minJournalCompactDelay": ("min_journal_compact_delay", parse_duration),
    "discardOldWhenFull": ("discard_old_when_full", _flag),
    "keepJournal": ("keep_journal", _flag),
    "syncJournal": ("sync_journal", lambda v, o: 0.0 if v == "always" else parse_duration(v, o)),
    "expireToQueue": ("expire_to_queue", _name),
    "maxExpireSweep": ("max_expire_sweep", _count),
    "fanoutOnly": ("fanout_only", _flag),
    "maxQueueAge": ("max_queue_age", parse_duration),
    "disableAggressiveRewrites": ("disable_aggressive_rewrites", _flag),
    "openTransactionTimeout": ("open_transaction_timeout", parse_duration),
}


def queue_overrides(section: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The options one config section sets, as QueueConfig field values."""
    out = {}
    for key, value in section.items():
        if key not in QUEUE_OPTIONS:
            raise ConfigError(f"{where}: unknown queue option {key!r} (known: {', '.join(sorted(QUEUE_OPTIONS))})")
        name, parse = QUEUE_OPTIONS[key]
        out[name] = parse(value, f"{where}.{key}")
    return out


@dataclass
class ServerConfig:
    """Server-wide options; ``default``, ``queues`` and ``aliases`` are what ``reload`` changes."""

    listen_address: str = "127.0.0.1"
    memcache_port: int | None = 22133
    text_port: int | None = 2222
    admin_port: int | None = 2223
    queue_path: str = "/tmp"
    expiration_timer_frequency: float | None = None
    client_timeout: float | None = None
    max_open_transactions: int = 1
    # true: the original's framing, the two bytes after a data block skipped unchecked
    # (`set q 0 0 2` + `hello` stored "he"); false: such a request is refused, nothing stored
    unchecked_data_terminator: bool = False
    default: dict[str, Any] = field(default_factory=dict)
    queues: dict[str, dict[str, Any]] = field(default_factory=dict)
    aliases: dict[str, list[str]] = field(default_factory=dict)

    def resolve(self, name: str) -> QueueConfig:
        """The configuration of queue ``name`` (a fanout child inherits its master's)."""
        master, plus, _ = name.partition("+")
        base = self.resolve(master) if plus else dataclasses.replace(QueueConfig(), **self.default)
        return dataclasses.replace(base, **self.queues.get(name, {}))


SERVER_OPTIONS: dict[str, tuple[str, Any]] = {
    "listenAddress": ("listen_address", lambda v, o: str(v)),
    "memcacheListenPort": ("memcache_port", lambda v, o: None if v is None else _port(v, o)),
    "textListenPort": ("text_port", lambda v, o: None if v is None else _port(v, o)),
    "adminHttpPort": ("admin_port", lambda v, o: None if v is None else _port(v, o)),
    "queuePath": ("queue_path", lambda v, o: str(v)),
    "expirationTimerFrequency": ("expiration_timer_frequency", parse_duration),
    "clientTimeout": ("client_timeout", parse_duration),
    "maxOpenTransactions": ("max_open_transactions", _count),
    "uncheckedDataTerminator": ("unchecked_data_terminator", _flag),
}


def _port(value: Any, option: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise ConfigError(f"{option}: {value!r} is not a port (0-65535)")
    return value


def config_from_mapping(data: Mapping[str, Any], where: str = "config") -> ServerConfig:
    """A ServerConfig from parsed TOML (or any mapping with the same shape)."""
    config = ServerConfig()
    for key, value in data.items():
        if key == "default":
            config.default = queue_overrides(_table(value, key), f"{where}: default")
        elif key == "queues":
            config.queues = {q: queue_overrides(_table(s, f"queues.{q}"), f"{where}: queues.{q}")
                             for q, s in _table(value, key).items()}
        elif key == "aliases":
            config.aliases = {a: _destinations(d, f"{where}: aliases.{a}") for a, d in _table(value, key).items()}
        elif key in SERVER_OPTIONS:
            name, parse = SERVER_OPTIONS[key]
            setattr(config, name, parse(value, f"{where}: {key}"))
        else:
            known = sorted([*SERVER_OPTIONS, "default", "queues", "aliases"])
            raise ConfigError(f"{where}: unknown option {key!r} (known: {', '.join(known)})")
    return config


def _table(value: Any, key: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key} must be a table, not {type(value).__name__}")
    return value


def _destinations(value: Any, option: str) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{option}: give a list of queue names")
    return list(value)


def load_config(path: str | Path) -> ServerConfig:
    """Read a TOML configuration file; ConfigError names the file and the problem."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except OSError as e:
        raise ConfigError(f"{path}: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    return config_from_mapping(data, str(path))


__all__ = ["ConfigError", "QueueConfig", "ServerConfig", "load_config", "config_from_mapping",
           "parse_duration", "parse_size", "QUEUE_OPTIONS"]
