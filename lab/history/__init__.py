"""What a run records and where: the history of operations and faults (``record``), its
phases and fault intervals (``phases``), the results folders (``paths``) and where a figure
came from (``provenance``)."""
