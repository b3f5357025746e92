"""Experiments built on runs: one run (``runner``), the comparison (``compare``), the fault
matrix (``matrix``), the swarm (``swarm``), planted bugs (``mutants``), the sim's fidelity
(``fidelity``) and calibration (``calibrate``), the regression gate (``regress*``), load tests
(``load``), benchmarks (``bench``) and queueing theory (``theory``)."""
