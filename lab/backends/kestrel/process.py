"""A `lab serve kestrel` process on free ports: for benchmarks, crash cycles and tests."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

READY = re.compile(r"kestrel serving .* on [^:]+: (.*)")


class KestrelProcess:
    """``lab serve kestrel`` with ``config`` (TOML text) over ``data_dir``; every port free."""

    def __init__(self, data_dir: Path, config: str = "", extra: tuple[str, ...] = ()):
        self.data_dir = Path(data_dir)
        self.config_path = self.data_dir.parent / f"{self.data_dir.name}.toml"
        self.config_path.write_text(config)
        self.extra = extra
        self.proc: subprocess.Popen | None = None
        self.ports: dict[str, int] = {}

    def start(self) -> "KestrelProcess":
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "lab.cli", "serve", "kestrel", "--port", "0", "--text-port", "0",
             "--admin-port", "0", "--data-dir", str(self.data_dir), "--config", str(self.config_path), *self.extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert self.proc.stdout is not None and self.proc.stderr is not None
        line = self.proc.stdout.readline()
        m = READY.search(line)
        if not m:
            self.proc.kill()
            raise RuntimeError(f"kestrel did not start: {line!r} {self.proc.stderr.read()[-2000:]}")
        self.ports = {k: int(v) for k, v in (part.split(" ") for part in m.group(1).split(", "))}
        return self

    @property
    def port(self) -> int:
        return self.ports["memcache"]

    def stop(self, sig: int = signal.SIGTERM) -> str:
        """Stop the server; what it wrote to stderr."""
        assert self.proc is not None
        self.proc.send_signal(sig)
        try:
            _, err = self.proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return err

    def kill(self) -> None:
        """kill -9: no clean-up, no fsync."""
        self.stop(signal.SIGKILL)
