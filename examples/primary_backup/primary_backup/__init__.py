"""`primary_backup`: a queue design for queue-lab. The algorithm is ``core`` (it talks to the world
through the lab's Runtime only, so it runs unchanged in the simulator and live), its HTTP
front is ``wire``, ``node`` boots a server node, ``serve`` is ``lab serve primary_backup``,
``driver`` is what the lab's runner drives, ``load`` its Locust client."""
