"""The two worlds that implement the Runtime port: what they share (``shared``), the live
world (``live``: real clock, processes, files with fsync, TCP through proxies), the
calibration's in-process world (``inprocess``), and how every command stops (``interrupt``).
The sim world is the top-level ``models`` package."""
