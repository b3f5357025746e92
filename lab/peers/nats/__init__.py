"""NATS JetStream (a work-queue stream per queue, an explicit-ack pull consumer), as a peer of the designs."""
