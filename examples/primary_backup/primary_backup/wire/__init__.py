"""The wire of `primary_backup`: its HTTP front over the core, on the lab's sans-IO HTTP/1.1 (no
sockets here either: a world moves the bytes)."""
