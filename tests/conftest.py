"""Shared fixtures: one SparkSession per test process (a JVM start costs seconds), a results
folder of a test's own, and a tag in every test's environment that marks the processes it
starts: the tests run in parallel (pytest-xdist), so "nothing left behind" looks at what this
test started (``own_processes``), not at every server on the machine."""

from __future__ import annotations

import itertools
import os

import pytest

from tests.own_processes import TAG

_numbers = itertools.count()


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
