"""The real brokers, driven beside the designs through the same driver interface
(``lab.design.peer.Peer``): Redis, RabbitMQ, NATS JetStream and beanstalkd, each the
broker's own binary from its Debian package, reached with its real client library from PyPI.
They run in the live world only: there is no core of theirs to simulate."""
