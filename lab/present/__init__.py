"""Presentation: charts (``plots``), the HTML report (``report``) and the notebooks' helpers
(``notebook_faults``)."""
