"""Queuefka's wire, sans-IO: its HTTP routes (``http``) on ``lab.design.http``, served by
whichever world moves the bytes."""
