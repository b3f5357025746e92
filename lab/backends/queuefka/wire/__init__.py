"""Queuefka's wire, sans-IO: its HTTP routes (``http``) on ``lab.wire.http``, served by
whichever world moves the bytes."""
