"""docs/your-own-design.md, executed: its ```console commands (lines starting ``$ ``) and its
```diff patches, in document order, in a fresh folder with a virtual environment layered on
the project's first on ``PATH``. Each command must exit 0, and every output line the page
shows must be in what the command printed, up to each ``…`` (so a ``checker: VALID`` line
is a verdict the run really reached). ```sh blocks ("where to go next") are not run.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.layered_venv import kill_leftovers, layered_venv, user_env

TUTORIAL = Path(__file__).resolve().parents[1] / "docs" / "your-own-design.md"
BLOCK = re.compile(r"^```(console|diff)\n(.*?)^```$", re.M | re.S)
ELLIPSIS = "…"


@dataclass
class Step:
    kind: str  # "command" or "patch"
    text: str  # the command line, or the patch
    shown: list[str] = field(default_factory=list)  # a command's output lines as the page shows them


def steps(markdown: str) -> list[Step]:
    """The page's commands (with the output it shows under each) and patches, in order."""
    out: list[Step] = []
    for kind, body in BLOCK.findall(markdown):
        if kind == "diff":
            out.append(Step("patch", body))
            continue
        for line in body.splitlines():
            if line.startswith("$ "):
                out.append(Step("command", line[2:]))
            elif line.strip():
                assert out and out[-1].kind == "command", f"output before any command: {line!r}"
                out[-1].shown.append(line)
    return out


def shown_in(shown: str, printed: list[str]) -> bool:
    """True if one printed line holds the shown line's pieces between ``…``, in order."""
    pieces = [p.strip() for p in shown.split(ELLIPSIS) if p.strip()]  # the page's spacing around … is its own
    if not pieces:
        return True  # an elision alone
    for line in printed:
        at = 0
        for piece in pieces:
            at = line.find(piece, at)
            if at < 0:
                break
            at += len(piece)
        else:
            return True
    return False


def test_the_page_parses_into_commands_and_patches():
    parsed = steps(TUTORIAL.read_text())
    commands = [s.text for s in parsed if s.kind == "command"]
    assert commands[0].startswith("lab new design my_queue") and any(c.startswith("pip install -e") for c in commands)
    assert sum(s.kind == "patch" for s in parsed) >= 2 and any(c.startswith("lab matrix") for c in commands)
    assert any(line.startswith("checker: VALID") for s in parsed for line in s.shown)
    assert shown_in("checker: VALID …", ["checker: VALID: 5 attempted"]) and not shown_in("checker: VALID …", ["checker: INVALID: 1 lost"])


@pytest.mark.slow
def test_the_tutorial_runs_as_written():
    with tempfile.TemporaryDirectory(prefix="tutorial-") as tmp:
        root = Path(tmp)
        venv = root / "venv"
        layered_venv(venv)
        work = root / "work"
        work.mkdir()
        env = user_env(venv, root / "results")
        took: list[tuple[str, float]] = []
        try:
            for step in steps(TUTORIAL.read_text()):
                started = time.monotonic()
                if step.kind == "patch":
                    done = subprocess.run(["patch", "-p1", "--forward"], input=step.text, cwd=work, env=env,
                                          capture_output=True, text=True, timeout=60)
                    assert done.returncode == 0, f"patch did not apply:\n{done.stdout}{done.stderr}"
                    took.append(("patch", time.monotonic() - started))
                    continue
                done = subprocess.run(["/bin/sh", "-c", step.text], cwd=work, env=env, capture_output=True,
                                      text=True, timeout=600)
                said = f"$ {step.text}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
                assert done.returncode == 0, f"exit {done.returncode}\n{said}"
                printed = (done.stdout + done.stderr).splitlines()
                for line in step.shown:
                    assert shown_in(line, printed), f"the page shows {line!r}; the command printed:\n{said}"
                took.append((step.text, time.monotonic() - started))
        finally:
            left = kill_leftovers(venv)
        assert not left, f"processes left running: {left}"
        print("\n".join(f"{t:6.1f} s  {what}" for what, t in took))
    assert not root.exists()
