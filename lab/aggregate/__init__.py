"""Aggregation over many runs' samples with Spark: the pipeline (``pipeline``), the Spark
session (``spark``) and the standalone cluster (``spark_cluster``)."""
