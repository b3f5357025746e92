"""Generated mutants (``lab mutants --generate``): mutants the lab did not write.

Where the hand-written mutants (a design's ``mutants.py``) are realistic mistakes chosen by
their author, these are every small change a mutation operator can make to a design's
``core`` and ``wire`` code, sampled: a measure of the lab's power that nobody tuned to it.
The rooms, bottom to top: ``operators`` (the operator set: cosmic-ray's and three of the
lab's own), ``sites`` (where a design's code can be mutated, and the seeded sample),
``apply`` (a site as a ``Mutant`` whose patch replaces one function's code, and the name
that re-creates it in any process), ``compare`` (a run's history against its control) and
``report`` (what ``lab mutants --generate`` prints and writes).
"""
