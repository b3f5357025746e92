"""Conformance, the checklist: one line per check — PASS, FAIL or SKIP with its reason — the
total, and the exit status `lab conform` gives (non-zero on any FAIL)."""

from __future__ import annotations

from dataclasses import dataclass, field

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"


@dataclass(frozen=True)
class Line:
    """One line of the checklist: a check (``group: what``), its status and why."""

    check: str
    status: str
    reason: str = ""
    seconds: float = 0.0

    def text(self) -> str:
        why = f": {self.reason}" if self.reason else ""
        return f"{self.status}  {self.check}{why}"


@dataclass
class Report:
    design: str
    lines: list[Line] = field(default_factory=list)
    seconds: float = 0.0
    quick: bool = False

    @property
    def failures(self) -> list[Line]:
        return [line for line in self.lines if line.status == FAIL]

    @property
    def passed(self) -> bool:
        return not self.failures

    def line(self, check: str) -> Line:
        """The first line whose check starts with ``check`` (KeyError if none)."""
        for line in self.lines:
            if line.check.startswith(check):
                return line
        raise KeyError(f"no line {check!r} in the report of {self.design}")

    def total(self) -> str:
        counts = {s: sum(1 for line in self.lines if line.status == s) for s in (PASS, FAIL, SKIP)}
        verdict = "conforms" if self.passed else "DOES NOT CONFORM"
        return (f"lab conform {self.design}{' --quick' if self.quick else ''}: {verdict} — "
                f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped in {self.seconds:.0f} s")

    def text(self) -> str:
        return "\n".join([*(line.text() for line in self.lines), self.total()])

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1
