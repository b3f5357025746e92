"""What ``lab mutants --generate`` hunts: per design, its sampled sites, and each made a mutant
or set aside as one that cannot be planted (and why).

The designs are those named, else every usable design with code to mutate (a real broker,
``lab.peers``, has none of the lab's). The hunt itself is ``lab.experiments.hunt``'s; this
room only chooses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from lab.design.mutants import Mutant
from lab.design.registry import is_peer, usable
from lab.experiments.generated import apply, sites
from lab.experiments.generated.sites import Site

WORLD = "sim"  # a live run is no function of its seed: its history cannot be held to a control's


class LiveRefused(ValueError):
    """``--generate`` with ``--world live``."""


class NotMutable(ValueError):
    """A design named that has no code of the lab's to mutate (a real broker, or no modules)."""


@dataclass(frozen=True)
class Generate:
    """How many sites to draw per design, the sample's seed, and the options to run with
    (None: each design's strongest, ``apply.strongest_options``)."""

    sample: int = 40
    seed: int = 1
    options: Mapping[str, Any] | None = None
    names: tuple[str, ...] = ()  # generated mutants' names to hunt instead of a sample
    #: stop a mutant as likely equivalent once this many runs all matched their controls (0: never):
    #: most generated mutants change nothing a run can see, and each would otherwise run every seed
    screen: int = 0


@dataclass
class Plan:
    spec: Generate
    sites: dict[str, list[Site]]  # design -> its sampled sites, in site order
    mutants: list[Mutant] = field(default_factory=list)  # the plantable ones, in the same order
    unplantable: dict[str, str] = field(default_factory=dict)  # site name -> why it cannot be planted


def designs_to_mutate(designs: Iterable[str] | None = None) -> list[str]:
    """``designs``, else every usable design (no real broker) that has modules to mutate."""
    if designs is None:
        return [d for d in usable() if not is_peer(d) and sites.design_modules(d)]
    for design in designs:
        if is_peer(design):
            raise NotMutable(f"{design} is a real broker (lab.peers): its code is its own, not the lab's, and it "
                             f"runs in the live world only")
        if not sites.design_modules(design):
            raise NotMutable(f"{design} has no code to mutate: no core or wire, and no module but its harness's")
    return list(designs)


def plan(spec: Generate, designs: Iterable[str] | None = None, world: str = WORLD) -> Plan:
    """The sites each design's sample draws (or the ``names`` given), made mutants. LiveRefused
    outside the sim world; NoSuchSite for a name that names no site."""
    if world != WORLD:
        raise LiveRefused(f"--generate hunts in the sim world only: a {world} run is no function of its seed, so its "
                          f"history cannot be compared with its control's")
    if spec.names:
        named = [sites.find(name) for name in spec.names]
        wanted = set(designs) if designs is not None else {site.design for site in named}
        chosen = Plan(spec, {})
        for site in named:
            if site.design in wanted:
                chosen.sites.setdefault(site.design, []).append(site)
    else:
        chosen = Plan(spec, {d: sites.sample(d, spec.sample, spec.seed) for d in designs_to_mutate(designs)})
    for design_sites in chosen.sites.values():
        for site in design_sites:
            try:
                chosen.mutants.append(apply.build(site, spec.options))
            except (apply.CannotPlant, sites.NoSuchSite) as e:
                chosen.unplantable[site.name] = str(e).removeprefix(f"{site.name}: ")
    return chosen
