"""The designs the lab ships, each a package of its own: ``ideal`` (the control), ``kestrel``,
``queuefka``, ``cassieq`` and ``primer``. Each holds its core (no I/O: only the Runtime), its
wire (sans-IO), its server entry (``serve``), its adapter (``driver``: the Backend) and its
planted bugs (``mutants``), and imports nothing of the lab but the design API, ``lab.design``.
They are found by name through ``lab.design.registry``.
"""
