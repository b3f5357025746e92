"""A Spark standalone cluster on this machine: a master and workers from the pyspark package.

The pip package ships ``bin/spark-class``; the master and each worker are that launcher
running ``org.apache.spark.deploy.master.Master`` / ``...worker.Worker`` on loopback.
``standalone_cluster()`` starts them, waits until every worker has registered, yields
the ``spark://`` URL, and stops them all on the way out. Logs go to a folder the caller
may keep.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

START_TIMEOUT = 120.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def _alive_workers(ui_port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as response:
            state = json.load(response)
    except (OSError, ValueError):
        return 0
    return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")


@contextmanager
def standalone_cluster(workers: int = 2, cores: int = 1, memory: str = "2g",
                       log_dir: Path | None = None) -> Iterator[str]:
    """Start a master and ``workers`` workers; yield the master URL; stop them after."""
    home = spark_home()
    launcher = str(home / "bin" / "spark-class")
    work = Path(tempfile.mkdtemp(prefix="queue-lab-spark-"))
    logs = log_dir or work
    logs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_WORKER_DIR": str(work)}
    port, ui = _free_port(), _free_port()
    processes: list[subprocess.Popen] = []

    def launch(name: str, *args: str) -> None:
        log = open(logs / f"{name}.log", "wb")
        processes.append(subprocess.Popen([launcher, *args], stdout=log, stderr=subprocess.STDOUT, env=env,
                                          start_new_session=True))

    try:
        launch("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
               "--webui-port", str(ui))
        url = f"spark://127.0.0.1:{port}"
        for i in range(workers):
            launch(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                   "--cores", str(cores), "--memory", memory, "--webui-port", str(_free_port()), url)
        deadline = time.monotonic() + START_TIMEOUT
        while _alive_workers(ui) < workers:
            if time.monotonic() > deadline or any(p.poll() is not None for p in processes):
                raise RuntimeError(f"the Spark cluster did not come up within {START_TIMEOUT:.0f} s; logs in {logs}")
            time.sleep(0.5)
        yield url
    finally:
        for p in processes:
            p.terminate()
        for p in processes:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
