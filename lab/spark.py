"""The one SparkSession of a process, with settings that suit a 2-core machine.

A JVM's settings are fixed when it starts (driver memory above all), so a process gets
one session: the first call decides, later calls get the same session. Defaults can be
overridden per call (``conf``) or by the environment: ``QUEUE_LAB_SPARK_MASTER`` and
``QUEUE_LAB_SPARK_CONF`` ("key=value,key=value").
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Mapping

DEFAULT_MASTER = "local[*]"
DEFAULTS = {
    # 200 by default: far too many tasks for 2 cores. 32 keeps the per-message hash maps
    # of 100 M samples small (4 took 30 % longer there); adaptive execution merges the
    # partitions of small inputs back into one or two.
    "spark.sql.shuffle.partitions": "32",
    # A groupBy on data already partitioned by its keys aggregates once, not twice
    # (lab.aggregate's per-message pass).
    "spark.sql.execution.combineAdjacentAggregation": "true",
    "spark.driver.memory": "4g",
    "spark.ui.enabled": "false",  # saves a port and start-up work
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.ui.showConsoleProgress": "false",
}
LOG_CONFIG = Path(__file__).with_name("log4j2.properties")

_session = None


class JavaMissing(RuntimeError):
    """PySpark needs Java 17+; this says how to get it."""


def check_java() -> None:
    if os.environ.get("JAVA_HOME") or shutil.which("java"):
        return
    raise JavaMissing("the Spark pipeline needs Java 17+: install it with "
                      "'sudo apt-get install -y openjdk-17-jre-headless' (or set JAVA_HOME)")


def settings(master: str | None = None, conf: Mapping[str, str] | None = None) -> tuple[str, dict[str, str]]:
    """The master and configuration a session would start with."""
    merged = dict(DEFAULTS)
    merged["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile=file:{LOG_CONFIG}"
    env = os.environ.get("QUEUE_LAB_SPARK_CONF", "")
    for item in filter(None, (part.strip() for part in env.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"QUEUE_LAB_SPARK_CONF entries are key=value, got {item!r}")
        merged[key.strip()] = value.strip()
    merged.update(conf or {})
    return master or os.environ.get("QUEUE_LAB_SPARK_MASTER", DEFAULT_MASTER), merged


def spark_session(master: str | None = None, conf: Mapping[str, str] | None = None):
    """The process's SparkSession, started on first use (6-10 s on this machine)."""
    global _session
    if _session is not None:
        return _session
    check_java()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    master, merged = settings(master, conf)
    builder = SparkSession.builder.master(master).appName("queue-lab")
    for key, value in merged.items():
        builder = builder.config(key, value)
    _session = builder.getOrCreate()
    _session.sparkContext.setLogLevel("ERROR")
    return _session


def stop_session() -> None:
    global _session
    if _session is not None:
        _session.stop()
        _session = None
