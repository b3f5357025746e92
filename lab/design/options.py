"""Backend options: what each design takes on ``lab run --option KEY=VALUE``, typed and ranged.

Each design declares its options as ``Option``s: a name, a word on what it does, the
values it allows (said in every error and in ``lab backends``), a parser, and a default.
Checking happens before anything runs, so a bad option is a usage error naming the
option and what it allows, never a verdict about the design.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping


class BadOption(ValueError):
    """A backend option the design does not have, or a value it cannot take."""


@dataclass(frozen=True)
class Option:
    name: str
    help: str
    #: the values it takes, for people: "a number of seconds > 0", "never, always or <N>ms"
    allowed: str
    #: the given value -> the value the design uses; raises ValueError (or TypeError) if not allowed
    parse: Callable[[Any], Any]
    #: the value when the option is not given (None: the design's own default applies)
    default: Any = None
    #: the default for people, where the design applies its own (None: ``default`` says it)
    default_text: str | None = None
    #: a default per world, where the worlds differ in what they can give (the sim world
    #: simulates a Cassandra; the live world has a SQLite file): ``{"sim": ..., "live": ...}``
    world_defaults: Mapping[str, Any] | None = None
    #: the one world a parsed value works in (None: any), e.g. the simulated Cassandra: "sim"
    only_in: Callable[[Any], str | None] | None = None
    #: a setting of one consumer's own client, read by ``Backend.client`` from ``self.options``
    #: (a prefetch, say): a workload's ``clients:`` entry may give a consumer its own value
    #: (``options:``), and the swarm draws consumers' values from these; empty: every client
    #: has the run's value
    per_consumer: tuple[Any, ...] = ()

    def describe(self) -> str:
        """One line for ``lab backends``: what it does, what it takes, its default."""
        default = self.default_text or self.default
        if default is None and self.world_defaults:
            default = ", ".join(f"{value} in the {world} world" for world, value in self.world_defaults.items())
        own = "; a consumer may have its own" if self.per_consumer else ""
        return f"{self.help}: {self.allowed}" + ("" if default is None else f" (default {default})") + own


def number(minimum: float = 0.0, *, inclusive: bool = False) -> Callable[[Any], float]:
    """A finite number above ``minimum`` (or equal to it, if ``inclusive``)."""

    def parse(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError("not a number")
        if value < minimum or (value == minimum and not inclusive):
            raise ValueError("out of range")
        return float(value)

    return parse


def whole(minimum: int) -> Callable[[Any], int]:
    """A whole number >= ``minimum``."""

    def parse(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError("not a whole number in range")
        return value

    return parse


#: the words a YAML reader turns into booleans (``--option confirms=off`` reads False)
_SWITCH_WORDS = {True: ("on", "yes", "true"), False: ("off", "no", "false")}


def choice(*values: str) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        if isinstance(value, bool):  # the word the user wrote, where it is one of the choices
            value = next((word for word in _SWITCH_WORDS[value] if word in values), value)
        if not isinstance(value, str) or value not in values:
            raise ValueError("not one of the choices")
        return value

    return parse


class Checked(dict[str, Any]):
    """Options already checked against a design's declarations, defaults filled in: what
    ``check`` returns. A ``Backend`` takes them as they are, so a run checks its options
    once, at its door."""


def check(owner: str, declared: Iterable[Option], given: Mapping[str, Any] | None,
          world: str | None = None) -> Checked:
    """``given`` parsed against ``declared``, with defaults filled in (a world's own where an
    option has one and ``world`` is given); BadOption names the first unknown key, value
    that is not allowed, or value that does not work in ``world``."""
    by_name = {option.name: option for option in declared}
    given = dict(given or {})
    for key in given:
        if key not in by_name:
            raise BadOption(f"backend {owner!r} has no option {key!r} (it has: {', '.join(sorted(by_name))})")
    result = {name: option.default for name, option in by_name.items() if option.default is not None}
    for name, option in by_name.items():
        if world is not None and option.world_defaults and world in option.world_defaults:
            result[name] = option.world_defaults[world]
    for key, value in given.items():
        option = by_name[key]
        try:
            result[key] = option.parse(value)
        except (TypeError, ValueError):
            raise BadOption(f"backend {owner!r}: option {key}={value!r}: must be {option.allowed}") from None
        home = option.only_in(result[key]) if option.only_in else None
        # a default passed back in (a filled-in set of options, as `lab compare` passes on) is no choice
        if world is not None and home is not None and home != world and result[key] != option.default:
            raise BadOption(f"backend {owner!r}: option {key}={value!r} works in the {home} world only, "
                            f"not the {world} world")
    return Checked(result)


TIMEOUT = Option("timeout", "seconds a client waits for a reply", "a number of seconds > 0", number(0.0), 1.0)
