"""Presentation: charts (``plots``), the HTML report (``report``) and a table's answer in words
(``answer``) — how results look. The experiments draw their charts with it, so it stands below
them."""
