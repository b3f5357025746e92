"""`lab bench loadgen`: what the lab's Locust user costs, against a minimal pymemcache
Locust user, both loading the same memcached from one Locust process each.

The minimal user (``minimal_memcache_locustfile.py``) does ``set`` then ``get`` of its own
key, timed by Locust's ``events.request.measure``. The lab's user is ``loadgen/locustfile.py``
with Kestrel's load client pointed at memcached (the same ``set``/``get``; plain gets, no
server-side wait), half the users producers and half consumers, with its nanosecond
samples written (``--lab-run-dir``). Requests/s come from each run's Locust CSV; the cases
run interleaved, the median of the repeats is quoted, and the ratio lab / minimal.
"""

from __future__ import annotations

import csv
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from lab.backends.kestrel.bench import Memcached, ensure_memcached

ROOT = Path(__file__).resolve().parents[1]  # the repository: where the locustfiles import from
LAB_LOCUSTFILE = Path(__file__).with_name("locustfile.py")
MINIMAL_LOCUSTFILE = Path(__file__).with_name("minimal_memcache_locustfile.py")
CASES = ("minimal", "lab")


def _locust(locustfile: Path, address: str, users: int, duration: float, folder: Path, extra: list[str]) -> float:
    """One headless Locust run in one process; its aggregated requests/s from the CSV."""
    folder.mkdir(parents=True)
    argv = [sys.executable, "-m", "locust", "-f", str(locustfile), "--headless", "--only-summary",
            "-u", str(users), "-r", str(max(users, 1) * 100), "-t", f"{duration:g}s", "--stop-timeout", "2",
            "--exit-code-on-error", "0", "--csv", str(folder / "locust"), "--host", address, *extra]
    with open(folder / "locust.log", "wb") as log:
        code = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT).returncode
    if code != 0:
        tail = (folder / "locust.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"locust -f {locustfile.name} exited with status {code}:\n{tail}")
    with open(folder / "locust_stats.csv", newline="") as f:
        for row in csv.DictReader(f):
            if row["Name"] == "Aggregated":
                return float(row["Requests/s"])
    raise RuntimeError(f"no Aggregated row in {folder / 'locust_stats.csv'}")


def _lab_args(address: str, users: int, run_dir: Path) -> list[str]:
    consumers = users // 2
    return ["--lab-backend", "kestrel", "--lab-targets", json.dumps({"kestrel": {"memcache": address}}),
            # memcached knows no /t=: plain keys only
            "--lab-options", json.dumps({"timeout": 5.0, "get_wait_ms": 0}), "--lab-ack", "auto",
            "--lab-producers", str(users - consumers), "--lab-consumers", str(consumers),
            "--lab-run-dir", str(run_dir)]


def _samples(run_dir: Path) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(p).metadata.num_rows for p in run_dir.glob("samples-*.parquet"))


def bench_loadgen(duration: float, users: int, repeats: int) -> dict[str, Any]:
    binary = ensure_memcached()
    if binary is None:
        raise RuntimeError("memcached is missing and could not be installed (apt-get install memcached)")
    scratch = Path(tempfile.mkdtemp(prefix="bench-loadgen-"))
    server = Memcached(binary)
    address = f"127.0.0.1:{server.port}"
    rates: dict[str, list[float]] = {case: [] for case in CASES}
    samples: list[int] = []
    try:
        for r in range(repeats):  # interleaved: drift in a shared machine hits both cases alike
            rates["minimal"].append(_locust(MINIMAL_LOCUSTFILE, address, users, duration, scratch / f"minimal{r}", []))
            run_dir = scratch / f"lab{r}"
            rates["lab"].append(_locust(LAB_LOCUSTFILE, address, users, duration, run_dir,
                                        _lab_args(address, users, run_dir / "samples")))
            samples.append(_samples(run_dir / "samples"))
            print(f"  round {r + 1}/{repeats}: minimal {rates['minimal'][-1]:,.0f} req/s, "
                  f"lab {rates['lab'][-1]:,.0f} req/s ({samples[-1]:,} samples written)")
    finally:
        server.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    minimal, lab = statistics.median(rates["minimal"]), statistics.median(rates["lab"])
    ratio = lab / minimal if minimal else 0.0
    print(f"minimal pymemcache user: {minimal:,.0f} requests/s")
    print(f"lab's user (samples on): {lab:,.0f} requests/s")
    print(f"ratio lab / minimal:     {ratio:.2f}  (goal >= 0.80)")
    return {"duration_s": duration, "users": users, "repeats": repeats, "server": "memcached",
            "minimal_rps": minimal, "lab_rps": lab, "ratio": ratio,
            "runs": {**rates, "lab_samples": samples}}


def run(args) -> dict[str, Any]:
    """``lab bench loadgen``: prints as it goes and returns the figures; ValueError for bad flags."""
    if not args.duration > 0 or args.users < 2:
        raise ValueError("--duration must be > 0 and --users >= 2 (the lab's user needs a producer and a consumer)")
    print(f"Locust user cost on memcached: minimal vs lab's, {args.users} users, {args.duration:g} s per run, "
          f"one process each, {args.repeats} rounds:")
    return bench_loadgen(args.duration, args.users, args.repeats)
