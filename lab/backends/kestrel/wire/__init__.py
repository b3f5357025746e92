"""Kestrel's wire: sans-IO parsers and encoders of the memcache (text and binary) and text
protocols, and their command handlers over the core's collection.

No sockets here: a server (``lab.backends.kestrel.server``, or the sim world's network)
feeds bytes in and writes the replies out.
"""
