"""RabbitMQ's load client: pika's BlockingConnection (pure-Python sockets, so gevent-safe once
Locust has patched them) on the ``rabbitmq`` node's ``amqp`` port, with the runner client's
settings (``lab.peers.rabbitmq.driver``).

put is ``basic.publish`` (mandatory) in a confirm-mode channel when ``confirms=on`` — pika
then waits for the broker's ``basic.ack`` and raises on a nack or a return — with
``delivery_mode`` 2 or 1 after ``persistent``. get is ``basic.get`` (manual acks when
reliable, ``auto_ack`` otherwise): one message per request, nothing buffered in the client;
ack is ``basic.ack``, release ``basic.nack(requeue=True)``. Refusals (a nack, an unroutable
message, a channel error such as a missing queue) raise ``Refused``; anything else (a
timeout, a cut connection) propagates as an unknown outcome, and the next call opens a new
connection — on which the old delivery tags mean nothing (the broker requeued them).
"""

from __future__ import annotations

from typing import Any

from lab.design.load import LoadClient, LoadPart, Refused, Targets, target

NODE, PORT = "rabbitmq", "amqp"
DEFAULT_TIMEOUT = 1.0
HEARTBEAT_S = 5  # a broker that stopped answering (paused, partitioned) is noticed


class RabbitmqLoadClient(LoadClient):
    """One AMQP connection and channel, opened at first use and again after an error."""

    def __init__(self, address: tuple[str, int], reliable: bool, timeout: float, confirms: bool, persistent: bool):
        self.address, self.reliable, self.timeout = address, reliable, timeout
        self.confirms, self.delivery_mode = confirms, 2 if persistent else 1
        self.connection: Any = None
        self.channel: Any = None
        self.generation = 0

    def _channel(self) -> Any:
        import pika

        if self.channel is not None and self.channel.is_open:
            return self.channel
        self._drop()
        host, port = self.address
        params = pika.ConnectionParameters(host=host, port=port, socket_timeout=self.timeout,
                                           stack_timeout=self.timeout * 2, blocked_connection_timeout=self.timeout,
                                           heartbeat=HEARTBEAT_S, connection_attempts=1)  # no retries
        self.connection = pika.BlockingConnection(params)
        self.channel = self.connection.channel()
        if self.confirms:
            self.channel.confirm_delivery()
        self.generation += 1
        return self.channel

    def _drop(self) -> None:
        connection, self.connection, self.channel = self.connection, None, None
        if connection is not None and connection.is_open:
            try:
                connection.close()
            except Exception:  # already broken
                pass

    def _do(self, what: str, call: Any) -> Any:
        import pika.exceptions as errors

        try:
            return call()
        except (errors.UnroutableError, errors.NackError) as e:
            raise Refused(f"{what}: {type(e).__name__}") from e
        except errors.ChannelClosedByBroker as e:
            self._drop()
            raise Refused(f"{what}: {e}") from e
        except BaseException:
            self._drop()
            raise

    def put(self, queue: str, body: bytes) -> None:
        import pika

        channel = self._channel()
        properties = pika.BasicProperties(delivery_mode=self.delivery_mode)
        self._do(f"publish to {queue}", lambda: channel.basic_publish("", queue, body, properties, mandatory=True))

    def get(self, queue: str) -> tuple[bytes, Any] | None:
        channel = self._channel()
        method, _properties, body = self._do(f"basic.get {queue}",
                                             lambda: channel.basic_get(queue, auto_ack=not self.reliable))
        if method is None:
            return None
        return body, ((self.generation, method.delivery_tag) if self.reliable else None)

    def _tag(self, token: Any, what: str) -> int:
        generation, tag = token
        if generation != self.generation or self.channel is None or not self.channel.is_open:
            raise Refused(f"{what}: the channel that delivered it closed (the message went back to the queue)")
        return tag

    def ack(self, queue: str, token: Any) -> None:
        tag = self._tag(token, "basic.ack")
        self._do("basic.ack", lambda: self.channel.basic_ack(tag))

    def release(self, queue: str, token: Any) -> None:
        tag = self._tag(token, "basic.nack")
        self._do("basic.nack", lambda: self.channel.basic_nack(tag, requeue=True))

    def close(self) -> None:
        self._drop()


def make_client(targets: Targets, options: dict, reliable: bool, user: int) -> LoadClient:
    """A client of the ``rabbitmq`` node's ``amqp`` port, with the peer's options."""
    address = target(targets, NODE, PORT, "rabbitmq")
    timeout = float(options.get("timeout") or DEFAULT_TIMEOUT)
    return RabbitmqLoadClient(address, reliable, timeout,
                              confirms=options.get("confirms", "on") == "on",
                              persistent=options.get("persistent", "on") == "on")


LOAD = LoadPart(ports=(PORT,), make_client=make_client)
