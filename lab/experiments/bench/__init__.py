"""Benchmarks: commands that print their figures and save them as JSON under results/bench/.

They are not tests: machines are shared and noisy, so each case is repeated, the median
is quoted, and every figure sits beside a peer measured in the same run.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from lab.history.paths import results_dir
from lab.history.provenance import machine, versions


def save(name: str, results: dict[str, Any], out: Path | None = None) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    path = out or results_dir() / "bench" / f"{name}-{stamp}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"benchmark": name, "when": stamp, "results": results, "versions": versions(), "machine": machine()}
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path
