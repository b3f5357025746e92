"""A throwaway virtual environment layered on the project's, for tests that install something
the way a user would: its own ``sys.prefix`` (so ``pip install`` writes there and nowhere
else) that also sees every package of the project's environment, queue-lab's editable
install included, through one ``.pth`` line. Its ``bin`` holds ``lab`` and ``pip`` scripts,
since the environment is made without pip and the project's own scripts name the project's
python.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

LAYER = "_queue_lab_layer.pth"


def layered_venv(where: Path) -> Path:
    """Make the environment at ``where``; its ``bin`` folder (put it first on ``PATH``)."""
    base = Path(subprocess.run([sys.executable, "-c", "import sys; print(sys.base_prefix)"], capture_output=True,
                               text=True, check=True).stdout.strip())
    # without pip: ensurepip would cost seconds, and the project's pip is seen through the layer
    subprocess.run([str(base / "bin" / "python3"), "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    # addsitedir, not a bare path: the project's own .pth files (queue-lab's editable finder) must run too
    (site / LAYER).write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    for script, module in (("lab", "lab.cli"), ("pip", "pip")):
        path = where / "bin" / script
        path.write_text(f'#!/bin/sh\nexec "{python}" -m {module} "$@"\n')
        path.chmod(0o755)
    return where / "bin"


def user_env(where: Path, results: Path) -> dict[str, str]:
    """The environment of a user working in the venv at ``where`` (made by ``layered_venv``):
    its ``bin`` first on ``PATH``, no ``PYTHONPATH``, and runs going to ``results`` (none
    lands in the project's ``results/``)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PATH=f"{where / 'bin'}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(where),
               QUEUE_LAB_RESULTS=str(results))
    return env


def kill_leftovers(where: Path) -> list[int]:
    """Kill every process still running from the venv at ``where`` (a `lab serve` left
    behind: only those, since their command line names the venv); the ones it found."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if str(where) in (proc / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(proc.name))
            except OSError:
                continue  # ended meanwhile, or not ours to read
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return found

