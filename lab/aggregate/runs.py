"""Reading runs: the sample files of run directories, each row tagged with its run.

What the Spark pipeline (``lab.aggregate.pipeline``) reads before its passes: the Parquet
samples of run directories, compare folders or files (the runner's, Locust's: one schema),
a folder an interrupt cut short skipped by name (``lab.worlds.interrupt``); each file's run
read from its footer statistics, so every row carries its run as one int (``Samples``); and
the ``manifest.json`` beside each run's samples, which gives its checks their verdicts.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from functools import reduce
from pathlib import Path
from typing import Any, Iterable

import pandas as pd
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lab.worlds import interrupt
from lab.history.record import SAMPLE_SCHEMA

RUN_KEYS = ["run_id", "backend", "world", "scenario"]


def spark_schema() -> T.StructType:
    """The sample schema (lab.history.record) as Spark types."""
    kinds = {"string": T.StringType(), "int64": T.LongType()}
    return T.StructType([T.StructField(f.name, kinds[str(f.type)], True) for f in SAMPLE_SCHEMA])


def sample_files(paths: Iterable[str | Path]) -> list[str]:
    """Parquet files of the given run directories, compare folders or files; a folder an
    interrupt cut short (``lab.worlds.interrupt``) is skipped, and none left is an error naming it."""
    files: list[str] = []
    given = list(map(Path, paths))
    _, skipped = interrupt.split_interrupted(p.parent if p.is_file() else p for p in given)
    for path in given:
        if interrupt.inside_interrupted(path.parent if path.is_file() else path) is not None:
            continue  # a folder an interrupt cut short: skipped by name (lab.worlds.interrupt.skipped_line)
        if path.is_file() and path.suffix == ".parquet":
            files.append(str(path))
        elif (path / "samples.parquet").exists():
            files.append(str(path / "samples.parquet"))
        elif path.is_dir() and (found := sorted(p for p in path.glob("*/samples.parquet")
                                                if not interrupt.interrupted(p.parent))):
            files += [str(p) for p in found]  # a compare folder: one run per subfolder
        else:
            raise FileNotFoundError(f"no samples in {path} (expected a run directory with samples.parquet)")
    if skipped and not files:
        raise FileNotFoundError("no runs to read: " + "; ".join(interrupt.skipped_line(p, cut)[5:] for p, cut in skipped))
    return files


Run = tuple  # (run_id, backend, world, scenario), as RUN_KEYS


def single_run(meta: pq.FileMetaData) -> Run | None:
    """The run of every row of a Parquet file, from its footer statistics (min = max in
    every row group); None if the file may hold several runs or has no statistics.

    Spec-conforming statistics bound every value, so min = max means one value, even for
    a writer that truncates long strings (a truncated max is rounded up, never equal)."""
    names = [meta.schema.column(i).name for i in range(meta.num_columns)]
    if not all(key in names for key in RUN_KEYS):
        return None
    runs = set()
    for group in range(meta.num_row_groups):
        row_group, run = meta.row_group(group), []
        for key in RUN_KEYS:
            stats = row_group.column(names.index(key)).statistics
            if stats is None or not stats.has_min_max or stats.null_count or stats.min != stats.max:
                return None
            run.append(stats.min)
        runs.add(tuple(run))
    return runs.pop() if len(runs) == 1 else None


@dataclass
class Samples:
    """The samples of any number of runs: every row carries ``run``, its run's index in
    ``runs`` (RUN_KEYS), so the passes group by one int, not by four strings per row."""

    frame: DataFrame
    runs: pd.DataFrame


def files_by_run(paths: Iterable[str | Path]) -> tuple[dict[Run, list[str]], list[str]]:
    """The sample files under ``paths`` by run, from their footers, and the files that may
    mix runs. Files without rows are left out; an unreadable file is a ValueError."""
    files: dict[Run, list[str]] = defaultdict(list)
    mixed: list[str] = []
    for path in sample_files(paths):
        try:
            meta = pq.read_metadata(path)
        except (OSError, ValueError) as error:  # pyarrow's ArrowInvalid is a ValueError
            raise ValueError(f"{path}: not a readable Parquet file ({error})") from error
        if meta.num_rows == 0:
            continue
        run = single_run(meta)
        if run is None:
            mixed.append(path)
        else:
            files[run].append(path)
    return files, mixed


def load_samples(spark: SparkSession, paths: Iterable[str | Path]) -> Samples:
    """The samples under ``paths``, each row tagged with its run.

    A run's files are read on their own, with the run as a literal: grouping by
    run_id, backend, world and scenario instead made the first pass 1.6x slower (100 M
    samples: 33-37 s against 20-22 s), for values that are the same in every row of a file.
    Files whose footers don't show a single run (a merged file, say) are read together
    and tagged by a join on their distinct runs."""
    files, mixed = files_by_run(paths)
    schema = spark_schema()
    read = spark.read.schema(schema).parquet
    found = [tuple(r) for r in read(*mixed).select(*RUN_KEYS).distinct().collect()] if mixed else []
    runs = sorted(set(files) | set(found), key=lambda run: [(v is None, v or "") for v in run])
    index = {run: i for i, run in enumerate(runs)}
    frames = [read(*paths).withColumn("run", F.lit(index[run])) for run, paths in files.items()]
    if mixed:
        table = spark.createDataFrame([(*run, index[run]) for run in found],
                                      T.StructType([*(schema[k] for k in RUN_KEYS),
                                                    T.StructField("run", T.IntegerType(), False)]))
        rows = read(*mixed)
        same_run = [rows[k].eqNullSafe(table[k]) for k in RUN_KEYS]
        frames.append(rows.join(F.broadcast(table), reduce(Column.__and__, same_run))
                      .select(*(rows[f.name] for f in schema), table["run"]))
    if not frames:  # no rows at all
        frames = [spark.createDataFrame([], spark_schema().add("run", T.IntegerType(), False))]
    return Samples(reduce(DataFrame.unionByName, frames), pd.DataFrame(runs, columns=RUN_KEYS))


def run_manifests(paths: Iterable[str | Path]) -> dict[str, dict[str, Any]]:
    """run_id -> manifest.json, for every run directory under ``paths`` that has one."""
    manifests = {}
    for file in sample_files(paths):
        path = Path(file).parent / "manifest.json"
        if path.is_file():
            manifest = json.loads(path.read_text())
            manifests[manifest["run_id"]] = manifest
    return manifests
