"""The one SparkSession of a process, with settings that suit a 2-core machine.

A JVM's settings are fixed when it starts (driver memory above all), so a process gets
one session: the first call decides, later calls get the same session. Defaults can be
overridden per call (``conf``) or by the environment: ``QUEUE_LAB_SPARK_MASTER`` and
``QUEUE_LAB_SPARK_CONF`` ("key=value,key=value").

Start-up is quiet: ``log4j2.properties`` keeps Spark's own start-up lines out (its "Setting
default log level" pair), and the JVM's stderr passes through a relay that drops the one
line no setting turns off (the incubator-module warning, ``START_UP_NOISE``); every other
line the JVM writes, errors above all, still reaches stderr.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
from pathlib import Path
from typing import Mapping

DEFAULT_MASTER = "local[*]"
DEFAULTS = {
    # 200 by default: far too many tasks for 2 cores. 32 keeps the per-message hash maps
    # of 100 M samples small (4 took 30 % longer there); adaptive execution merges the
    # partitions of small inputs back into one or two.
    "spark.sql.shuffle.partitions": "32",
    # A groupBy on data already partitioned by its keys aggregates once, not twice
    # (lab.aggregate.pipeline's per-message pass).
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
# Printed by the JVM itself for the --add-modules Spark's launcher always passes.
START_UP_NOISE = (b"WARNING: Using incubator modules:",)

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
    # Python tasks (lab swarm/matrix --spark) run in this interpreter, the lab's venv, not whatever
    # python3 the PATH finds; on a cluster that path must exist on every worker (docs/spark.md)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    master, merged = settings(master, conf)
    spark_conf = SparkConf().setMaster(master).setAppName("queue-lab").setAll(list(merged.items()))
    if SparkContext._gateway is None:  # the JVM outlives a stopped session: start it once, quietly
        SparkContext(conf=spark_conf, gateway=_quiet_gateway(spark_conf))
    _session = SparkSession.builder.config(conf=spark_conf).getOrCreate()
    _session.sparkContext.setLogLevel("ERROR")
    return _session


def _quiet_gateway(spark_conf):
    """PySpark's JVM gateway, with the JVM's stderr relayed to ours minus START_UP_NOISE."""
    from pyspark.java_gateway import launch_gateway

    read_end, write_end = os.pipe()
    relay = threading.Thread(target=_relay, args=(read_end,), name="spark-stderr", daemon=True)
    relay.start()  # before the JVM: it must never block on a full pipe
    try:
        gateway = launch_gateway(spark_conf, popen_kwargs={"stderr": write_end})
    except BaseException as e:
        os.close(write_end)
        # a JVM that failed to start: show what it said before the error; but not on Ctrl-C, when
        # the JVM (which ignores SIGINT) is still starting: lab.cli stops it (lab.worlds.interrupt)
        relay.join(timeout=0 if isinstance(e, KeyboardInterrupt) else 5)
        raise
    os.close(write_end)  # the JVM holds its own copy; the relay ends when the JVM does
    return gateway


def _relay(read_end: int) -> None:
    with os.fdopen(read_end, "rb", buffering=0) as stream:
        for line in iter(stream.readline, b""):
            if not line.startswith(START_UP_NOISE):
                os.write(2, line)  # fd 2, as the JVM wrote before: no Python-level buffering


def session_started() -> bool:
    """Whether this process's SparkSession is running (``spark_session`` started it, ``stop_session`` not yet)."""
    return _session is not None


def stop_session() -> None:
    global _session
    if _session is not None:
        _session.stop()
        _session = None
