"""Judging a run's history: the checker (``checker``) with order (``order``) and attribution of
anomalies to faults (``attribution``), the verdict against a design's promises (``verdict``),
recovery times (``recovery``) and latency summaries (``summary``)."""
