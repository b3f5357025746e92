"""Kestrel's wire: sans-IO parsers and encoders of the memcache (text and binary) and text
protocols, and their command handlers over the core's collection.

No sockets here: a world drives a ``connection.KestrelConnection`` (the live world over
TCP, ``lab.worlds.live.streams``; the sim world over simulated links, ``models.streams``), and the
lab's queue client encodes requests and reads replies with ``client``.
"""
