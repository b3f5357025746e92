"""A `lab serve kestrel` process on free ports with a TOML config: for benchmarks, crash
cycles and tests (``lab.worlds.live.processes.ServerProcess`` with Kestrel's ``--config``)."""

from __future__ import annotations

from pathlib import Path

from lab.design.worlds import ServerProcess


class KestrelProcess(ServerProcess):
    """``lab serve kestrel`` with ``config`` (TOML text, in ``<data_dir>.toml``) over ``data_dir``;
    ``ports`` by name (memcache, text, admin), ``port`` the memcache one."""

    def __init__(self, data_dir: Path, config: str = "", extra: tuple[str, ...] = ()):
        data_dir = Path(data_dir)
        self.config_path = data_dir.parent / f"{data_dir.name}.toml"
        data_dir.parent.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(config)
        super().__init__("kestrel", data_dir, ["--config", str(self.config_path), *extra])
