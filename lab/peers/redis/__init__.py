"""Redis Streams with a consumer group, as a peer of the designs."""
