"""RabbitMQ (classic and quorum queues, publisher confirms, manual acks) as a peer of the designs."""
