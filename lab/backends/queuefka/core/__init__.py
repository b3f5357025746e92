"""Queuefka's core: the segment log's format (framing, batches), its writer and reader on
the Store port, consumer groups and retention, and the broker that answers requests.

Clock, store and lock are passed in; nothing here reaches the OS (tests/test_core_purity.py
walks the imports). The embeddable library on plain files is ``lab.backends.queuefka.embedded``.
"""
