"""Shared fixtures: one SparkSession per test process (a JVM start costs seconds), a results
folder of a test's own, and a tag in every test's environment that marks the processes it
starts: the tests run in parallel (pytest-xdist), so "nothing left behind" looks at what this
test started (``own_processes``), not at every server on the machine."""

from __future__ import annotations

import itertools
import json
import os
import resource
import time

import pytest

from tests.own_processes import TAG

_numbers = itertools.count()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that uses the in-process SparkSession runs on one xdist worker (``--dist
    loadgroup``): a JVM start is seconds of both cores, and four workers started four. A test
    marked ``quiet`` must be slow too (Makefile's test-slow runs those alone)."""
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("spark"))
        if item.get_closest_marker("quiet") and not item.get_closest_marker("slow"):
            # `make test` runs the fast tier in parallel: only the slow tier runs quiet tests alone
            raise pytest.UsageError(f"{item.nodeid} is marked quiet but not slow: only `make test-slow` runs quiet tests alone")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """With ``QUEUE_LAB_TEST_CPU=FILE``, one JSON line per test: its wall time and the CPU
    seconds it cost, its own and its children's (servers, subprocesses, Spark's JVM when it
    started one) - where a parallel suite's time goes is CPU, not the durations of tests that
    wait side by side."""
    into = os.environ.get("QUEUE_LAB_TEST_CPU")
    if not into:
        return (yield)
    wall, own, children = time.monotonic(), time.process_time(), resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        return (yield)
    finally:
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        line = {"test": item.nodeid, "wall": round(time.monotonic() - wall, 3),
                "cpu": round(time.process_time() - own, 3),
                "children_cpu": round(after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime, 3)}
        with open(into, "a") as out:  # one short append per test: the workers' lines do not interleave
            out.write(json.dumps(line) + "\n")


@pytest.fixture(scope="session")
def spark():
    from lab.aggregate.spark import spark_session, stop_session

    session = spark_session("local[2]")
    yield session
    stop_session()


@pytest.fixture
def results(tmp_path, monkeypatch):
    """Runs and reports go to a folder of the test's own (``$QUEUE_LAB_RESULTS``), so what a
    command wrote, or did not write, can be checked."""
    monkeypatch.setenv("QUEUE_LAB_RESULTS", str(tmp_path / "results"))
    return tmp_path / "results"


@pytest.fixture(autouse=True)
def _tag_the_processes_it_starts(monkeypatch):
    """Every process the test starts inherits this tag in its environment."""
    monkeypatch.setenv(TAG, f"{os.getpid()}-{next(_numbers)}")
