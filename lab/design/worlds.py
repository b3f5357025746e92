"""What a design takes from the two worlds, beside the port: the design API's one room above
the worlds (``lab.worlds``, ``models``).

A design's server entry (``serve.py``: ``lab serve NAME``) runs its node on a live runtime
(``LiveWorld``), prints the ready line the live world waits for (``ready_line``) and stops
cleanly on a signal (``on_signals``); an embedded mode or a benchmark starts server
processes (``ServerProcess``), serves or reads streams (``serve_connections``,
``LiveConnection``) and keeps files (``FileStore``). A design whose store is a separate
system in the sim world runs it on the sim world's simulated Cassandra
(``CassandraModel``, ``SimCassandraNode``, ``SimCassandraStore``).
"""

from __future__ import annotations

from lab.worlds.interrupt import on_signals
from lab.worlds.live import LiveWorld
from lab.worlds.live.disk import FileStore
from lab.worlds.live.processes import ServerProcess, ready_line
from lab.worlds.live.streams import LiveConnection, serve_connections
from models.cassandra import CassandraModel, SimCassandraNode, SimCassandraStore

__all__ = ["CassandraModel", "FileStore", "LiveConnection", "LiveWorld", "ServerProcess", "SimCassandraNode",
           "SimCassandraStore", "on_signals", "ready_line", "serve_connections"]
