"""What a run asks for: workload files (``spec``), the fault kinds and schedules (``faults``),
the nemesis that applies them in either world (``nemesis``); the standard workloads
(``*.yaml``) and the scenarios (``scenarios/``) are files beside them."""
