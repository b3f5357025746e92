"""How a design is shown to people, apart from what it does: the line ``lab backends`` prints
and the colour every chart draws it in.

A design declares one ``About`` on its Backend (``about = About("...", colour="#1f77b4")``);
the registry reads the colour, the catalogue the summary. Part of the design API
(``lab.design``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# a colour every chart library takes as it is
HEX_COLOUR = re.compile(r"#[0-9a-fA-F]{6}")


@dataclass(frozen=True)
class About:
    """A design's presentation: one line on what it is, and its chart colour."""

    #: one line for ``lab backends``: what the design is, in its own terms
    summary: str
    #: the colour every chart draws the design in, as ``#rrggbb``; None: a spare one, chosen by its name
    colour: str | None = None

    def __post_init__(self) -> None:
        if not self.summary.strip():
            raise ValueError("About: the summary is empty; say in one line what the design is")
        if self.colour is not None and not HEX_COLOUR.fullmatch(self.colour):
            raise ValueError(f"About: colour {self.colour!r} is not #rrggbb (or None for a spare one)")
