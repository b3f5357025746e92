"""The design API: everything a design imports from the lab, in one place.

A design — one of the lab's own in ``lab/backends/`` or one installed from elsewhere — is
written against these names and nothing else of the lab:

- the Runtime port, the one room a core talks to the world through (``Runtime``: clock,
  tasks, events, random, disk, network), its errors (``CallTimeout``, ``ConnectionLost``, ``Unreachable``,
  ``RemoteError``, ``NodeDown``, ``ProtocolDrop``, ``Cancelled``) and its parts (``Store``,
  ``Connection``, ``ServerConnection``, ...); ``RuntimeStore``, the Store on a Runtime disk;
- the driver interface: ``Backend`` (the design's nodes, boot and clients), ``QueueClient``
  and ``Delivery``, ``Rejected`` for a definite refusal, ``InternalError`` for a server
  whose own code raised, and ``http_body``, which turns an HTTP reply into one of those; ``Parts``, where a design
  declares its server entry, load client, planted bugs, benchmark, tools and cluster
  command; the ``World`` it is started in and the ``ServerSpec`` it hands the world;
- what a Backend declares beside its driver, each in a record of its own: ``About`` (its
  summary and chart colour), ``Promised`` (its promises' rule and the option sets that
  change them) and ``Cpu`` (its sim CPU model: calibration file, nodes that cost none);
- what a design promises (``Promises``, ``Allowance`` and their words: delivery, order,
  the scopes of an allowance) and the options it takes (``Option`` with ``number``,
  ``whole``, ``choice``; ``TIMEOUT``; ``BadOption``);
- the sans-IO HTTP/1.1 wire (``Router``, ``Request``, ``Response``, ``HttpServerConnection``,
  ``encode_request``, ``ResponseReader``, ...), service-time models (``ServiceModel``) and
  message bodies (``decode``);
- planted bugs for ``lab mutants`` (``Mutant``, ``Patch``);
- ``Registration``, for a plug-in whose entry point declares more than its Backend class
  (its package, its colour).

A core imports the port alone, ``lab.design.runtime``, so that nothing but the port is run on
its way (``tests/test_core_purity.py``). What a server entry, an embedded mode or a
benchmark takes from the two worlds (a live runtime, the ready line, signals, a simulated
store) is ``lab.design.worlds``.
"""

from __future__ import annotations

from lab.design.about import About
from lab.design.backend import PARTS, Backend, Delivery, InternalError, Parts, QueueClient, Rejected, http_body, outcome_of
from lab.design.http import JSON, Request, Response, error, json_response
from lab.design.http_client import HttpReply, ResponseReader, encode_request
from lab.design.http_router import Router
from lab.design.http_server import HttpServerConnection, encode_response
from lab.design.message import decode, encode, message_id, split_id
from lab.design.mutants import Mutant, Patch
from lab.design.options import TIMEOUT, BadOption, Option, choice, number, whole
from lab.design.registry import Registration
from lab.design.promises import (ANY_FAULT, AT_LEAST_ONCE, AT_MOST_ONCE, CLOSED, CUT, DISK_LOSS, EXACTLY_ONCE, FIFO,
                                 DEGRADED, FIFO_PER_CONSUMER, FSYNC_MARGIN_S, GRACE_S, HOLDERS, IN_FORCE, NO_ORDER, Allowance,
                                 Promised, Promises)
from lab.design.runtime import (Accept, Boot, CallTimeout, Cancelled, Connection, ConnectionLost, Disk, Event, File, Handle, Handler,
                                Network, NodeDown, ProtocolDrop, RemoteError, Runtime, Send, ServerConnection, Store,
                                Task, Unreachable)
from lab.design.service import Cpu, ServiceModel, ServiceTime, message_bytes, message_kind, request_kind
from lab.design.storage import RuntimeStore
from lab.design.world import ServerSpec, World

__all__ = [
    # the Runtime port
    "Accept", "Boot", "CallTimeout", "Cancelled", "Connection", "ConnectionLost", "Disk", "Event", "File", "Handle", "Handler",
    "Network", "NodeDown", "ProtocolDrop", "RemoteError", "Runtime", "RuntimeStore", "Send", "ServerConnection",
    "Store", "Task", "Unreachable",
    # the driver interface
    "Backend", "Delivery", "QueueClient", "Rejected", "InternalError", "http_body", "outcome_of", "Parts", "PARTS", "ServerSpec", "World",
    # declared beside the driver: how it is shown, what it costs in the sim
    "About", "Cpu",
    # promises and options
    "ANY_FAULT", "AT_LEAST_ONCE", "AT_MOST_ONCE", "CLOSED", "CUT", "DISK_LOSS", "EXACTLY_ONCE", "FIFO",
    "DEGRADED", "FIFO_PER_CONSUMER", "FSYNC_MARGIN_S", "GRACE_S", "HOLDERS", "IN_FORCE", "NO_ORDER", "Allowance", "Promised", "Promises",
    "TIMEOUT", "BadOption", "Option", "choice", "number", "whole",
    # the HTTP wire, service times, message bodies
    "JSON", "HttpReply", "HttpServerConnection", "Request", "Response", "ResponseReader", "Router",
    "encode_request", "encode_response", "error", "json_response",
    "ServiceModel", "ServiceTime", "message_bytes", "message_kind", "request_kind",
    "decode", "encode", "message_id", "split_id",
    # planted bugs
    "Mutant", "Patch",
    # a plug-in's entry point, when it declares more than its Backend class
    "Registration",
]
