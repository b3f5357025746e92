"""Shared fixtures: one SparkSession for the whole test run (a JVM start costs 6-10 s)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    from lab.aggregate.spark import spark_session, stop_session

    session = spark_session("local[2]")
    yield session
    stop_session()
