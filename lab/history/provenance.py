"""Where a figure came from: package versions and the machine, for manifests and benchmarks."""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata

PACKAGES = ("queue-lab", "simpy", "numpy", "pandas", "pyarrow", "pyspark", "locust", "uvloop")


def versions() -> dict[str, str]:
    found = {"python": sys.version.split()[0]}
    for package in PACKAGES:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    return found


def machine() -> dict[str, object]:
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_implementation(),
    }
