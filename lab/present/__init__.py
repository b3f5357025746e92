"""Presentation: charts (``plots``) and the HTML report (``report``) — how results look. The
experiments draw their charts with it, so it stands below them."""
