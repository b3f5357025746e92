"""Kestrel's core: queues, the collection, sessions and the journal's on-disk format.

Every module here reaches time, waiting and disk only through the Runtime (and the
Store port), so one core runs in the sim world and behind the live servers; a test
(tests/test_core_purity.py) walks the imports to hold it so.
"""
