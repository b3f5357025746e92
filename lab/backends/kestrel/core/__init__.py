"""Kestrel's core: queues, the collection, sessions and the two protocols' commands.

Every module here reaches time, waiting and disk only through the Runtime (and the
Store port), so one core runs in the sim world and behind the live servers.
"""
