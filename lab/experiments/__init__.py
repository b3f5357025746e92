"""Experiments built on runs: one run (``runner``), the comparison (``compare``), the fault
matrix (``matrix``), the swarm (``swarm``), planting bugs and hunting them (``planting``, ``hunt``), the sim's fidelity
(``fidelity``) and calibration (``calibrate``), the regression gate (``regress*``), load tests
(``load``), benchmarks (``bench``), queueing theory (``theory``), and the fault notebooks'
helpers (``families``)."""
