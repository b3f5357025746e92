"""RabbitMQ as a peer: the Debian package's own start script
(``/usr/lib/rabbitmq/bin/rabbitmq-server``, not ``/usr/sbin``'s, which switches to the
``rabbitmq`` user) on a private node name, AMQP port, distribution port and Erlang port
mapper, one durable queue per run queue (classic or quorum); the client is aio-pika.

put is ``basic.publish`` to the default exchange (mandatory: an unroutable message comes
back as a refusal), ``delivery_mode`` 2 or 1 after ``persistent``, in a channel in confirm
mode when ``confirms=on`` — the put then returns on the broker's ``basic.ack``. A reliable
get is a consumer with ``basic.qos(prefetch)`` and manual acks (``prefetch=0``: one
``basic.get`` per get); ack is ``basic.ack``, release ``basic.nack(requeue=true)``. A plain
get is ``basic.get`` with ``no_ack``: at most once, and nothing is buffered in the client
that a close could drop.

What it promises is the documentation's (``confirms.md``, ``quorum-queues``): a confirm of a
persistent message routed to a durable classic queue goes out after it is on disk, and a
quorum queue's after its write-ahead log is fdatasynced, whatever the delivery mode; so a
power loss takes nothing confirmed. Without confirms nothing is promised of a publish; a
transient message on a classic queue is gone after any restart. Unacknowledged deliveries
go back to the queue when their channel or connection closes (the 30-minute
``consumer_timeout`` is no lease a run meets); a requeued message goes back to its place in a
classic queue and to the tail of a quorum queue.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from lab.design import (TIMEOUT, About, Delivery, Option, Parts, QueueClient, Rejected, Runtime, Unreachable, choice,
                        whole)
from lab.design.peer import Launch, MissingBinary, Peer, Place
from lab.peers.rabbitmq.promises import PROMISED

if TYPE_CHECKING:
    from pamqp.common import Arguments  # a queue's arguments, as aio_pika (on pamqp) takes them

BIN = Path("/usr/lib/rabbitmq/bin")
QUEUE_TYPES = ("classic", "quorum")
SWITCH = ("on", "off")
PROBE_TIMEOUT_S = 10.0
HEARTBEAT_S = 1  # AMQP heartbeat the clients ask for (the broker's default is 60 s)


def node_name(place: Place) -> str:
    """The Erlang node name, unique per run: its AMQP port is."""
    return f"lab{place.ports['amqp']}@localhost"


def environment(place: Place) -> dict[str, str]:
    """What the server script and ``rabbitmqctl`` both need to find this node and nothing
    else: the cookie home, the private port mapper, and no system-wide configuration."""
    home = place.home
    return {
        "HOME": str(home),  # the Erlang cookie is created in $HOME/.erlang.cookie
        "RABBITMQ_NODENAME": node_name(place),
        "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
        "RABBITMQ_NODE_PORT": str(place.ports["amqp"]),
        "RABBITMQ_DIST_PORT": str(place.ports["dist"]),
        "ERL_EPMD_PORT": str(place.ports["epmd"]),
        "RABBITMQ_CONFIG_FILE": str(home / "rabbitmq.conf"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(home / "enabled_plugins"),
        "RABBITMQ_MNESIA_BASE": str(place.data),  # on the power-loss file system
        "RABBITMQ_LOG_BASE": str(home / "log"),
        "RABBITMQ_PID_FILE": str(home / "pid"),
        "RABBITMQ_CONF_ENV_FILE": str(home / "no-rabbitmq-env.conf"),  # never /etc/rabbitmq's
        "ERL_CRASH_DUMP": str(home / "erl_crash.dump"),  # a VM that fails writes here, not in the caller's folder
    }


def await_startup(place: Place, env: Mapping[str, str]) -> bool:
    """Has the node finished booting? First its AMQP listener must accept a connection (it
    opens just before boot completes): each ``rabbitmqctl`` is an Erlang VM of its own, and
    polling with it would take the CPU the booting node needs. Then ``rabbitmqctl
    await_startup``, which fails at once while the node is not registered with the port
    mapper, so the world simply asks again."""
    import os

    with socket.create_connection(("127.0.0.1", place.ports["amqp"]), timeout=0.5):
        pass  # refused while booting: the world asks again
    done = subprocess.run([str(BIN / "rabbitmqctl"), "-n", node_name(place), "await_startup", "--timeout", "5"],
                          env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          timeout=PROBE_TIMEOUT_S, check=False, cwd=place.home)
    return done.returncode == 0


class RabbitmqClient(QueueClient):
    """One AMQP connection and channel (aio-pika), opened at first use and again after any
    error: a broken channel's deliveries went back to the queue, and its tokens are void."""

    def __init__(self, peer: "RabbitmqPeer", rt: Runtime, reliable: bool):
        self.rt, self.reliable = rt, reliable
        self.host, self.port = peer.address(rt)
        self.timeout = peer.options["timeout"]
        self.confirms = peer.options["confirms"] == "on"
        self.delivery_mode = 2 if peer.options["persistent"] == "on" else 1
        self.prefetch = peer.options["prefetch"]
        self.quorum = peer.options["queue_type"] == "quorum"
        self.connection: Any = None
        self.channel: Any = None
        self.buffers: dict[str, asyncio.Queue] = {}  # a consumer's deliveries per queue, not yet handed out
        self.queues: dict[str, Any] = {}  # aio-pika's queue handles on the current channel
        self.generation = 0  # which connection a token belongs to

    async def _channel(self) -> Any:
        import aio_pika

        if self.channel is not None and not self.channel.is_closed:
            return self.channel
        await self._drop()
        try:
            # aio_pika.connect, not connect_robust: a reconnect that replays a publish duplicates it
            # short heartbeats: a connection whose broker stopped answering (paused, cut off by a
            # partition that holds the bytes) is noticed (aiormq closes it after three missed ones)
            self.connection = await aio_pika.connect(host=self.host, port=self.port, timeout=self.timeout,
                                                     heartbeat=HEARTBEAT_S)
            self.channel = await asyncio.wait_for(self.connection.channel(publisher_confirms=self.confirms),
                                                  self.timeout)
            if self.reliable and self.prefetch:
                await asyncio.wait_for(self.channel.set_qos(prefetch_count=self.prefetch), self.timeout)
        except BaseException as e:
            await self._drop()
            if isinstance(e, Exception):  # nothing was asked of the broker yet: a definite failure
                raise Unreachable(f"rabbitmq at {self.host}:{self.port}: {type(e).__name__}: {e}") from e
            raise
        self.generation += 1
        return self.channel

    async def _drop(self) -> None:
        """Forget the connection (the broker requeues what it had delivered on it)."""
        connection, self.connection, self.channel = self.connection, None, None
        self.buffers.clear()
        self.queues.clear()
        if connection is not None:
            try:
                await asyncio.wait_for(connection.close(), self.timeout)
            except BaseException:  # a connection a fault cut: nothing to close cleanly
                pass

    async def _do(self, what: str, call: Any) -> Any:
        """Run one AMQP exchange: the broker's definite refusals as Rejected; any other error
        drops the connection (its outcome is unknown) and propagates."""
        import aiormq.exceptions as errors

        try:
            return await asyncio.wait_for(call, self.timeout)
        except (errors.DeliveryError, errors.ChannelNotFoundEntity, errors.ChannelPreconditionFailed) as e:
            await self._drop()  # a channel error closes the channel
            raise Rejected(f"{what}: {e}") from e
        except BaseException:
            await self._drop()
            raise

    async def put(self, queue: str, body: bytes) -> None:
        import aio_pika

        channel = await self._channel()
        message = aio_pika.Message(body, delivery_mode=self.delivery_mode)
        # with confirms, this returns on the broker's basic.ack (a nack or a return: DeliveryError);
        # without, once the frames are written to the socket
        await self._do(f"publish to {queue}", channel.default_exchange.publish(message, routing_key=queue))

    async def get(self, queue: str, wait: float) -> Delivery | None:
        channel = await self._channel()
        if self.reliable and self.prefetch:
            return await self._consume(channel, queue, wait)
        deadline = self.rt.now() + wait
        while True:  # basic.get answers at once, empty or not: poll it for ``wait``
            amqp_queue = await self._queue(channel, queue)
            message = await self._do(f"basic.get {queue}", amqp_queue.get(no_ack=not self.reliable, fail=False,
                                                                          timeout=None))
            if message is not None:
                return Delivery(queue, message.body, (self.generation, message) if self.reliable else None)
            if self.rt.now() >= deadline:
                return None
            await asyncio.sleep(min(0.005, max(0.0, deadline - self.rt.now())))

    async def _consume(self, channel: Any, queue: str, wait: float) -> Delivery | None:
        buffer = self.buffers.get(queue)
        if buffer is None:
            buffer = self.buffers[queue] = asyncio.Queue()
            amqp_queue = await self._queue(channel, queue)
            await self._do(f"basic.consume {queue}", amqp_queue.consume(buffer.put, no_ack=False))
        try:
            message = await asyncio.wait_for(buffer.get(), wait)
        except asyncio.TimeoutError:
            if self.channel is None or self.channel.is_closed or self.connection.is_closed:  # it broke meanwhile
                await self._drop()
                raise Unreachable(f"rabbitmq: the channel consuming {queue} closed") from None
            return None
        return Delivery(queue, message.body, (self.generation, message))

    async def _queue(self, channel: Any, queue: str) -> Any:
        """aio-pika's handle on ``queue`` (declare() made it: no declare here)."""
        handle = self.queues.get(queue)
        if handle is None:
            handle = self.queues[queue] = await channel.get_queue(queue, ensure=False)
        return handle

    def _mine(self, delivery: Delivery, what: str) -> Any:
        generation, message = delivery.token
        if generation != self.generation or self.channel is None or self.channel.is_closed:
            # the channel it came on is gone: the broker requeued it already
            raise Rejected(f"{what}: the channel that delivered it closed (the message went back to the queue)")
        return message

    async def ack(self, delivery: Delivery) -> None:
        message = self._mine(delivery, "basic.ack")
        await self._do("basic.ack", message.ack())

    async def release(self, delivery: Delivery) -> None:
        message = self._mine(delivery, "basic.nack")
        await self._do("basic.nack", message.nack(requeue=True))

    async def backlog(self, queue: str) -> int | None:
        """A classic queue's ready messages (a passive declare) plus what this client holds
        unhanded; None for a quorum queue, whose count lags while its log replays after a
        restart."""
        if self.quorum:
            return None
        channel = await self._channel()
        declared = await self._do(f"queue.declare {queue} passive",
                                  channel.declare_queue(queue, passive=True, timeout=self.timeout))
        held = self.buffers[queue].qsize() if queue in self.buffers else 0
        return int(declared.declaration_result.message_count) + held

    async def close(self) -> None:
        await self._drop()


class RabbitmqPeer(Peer):
    name = "rabbitmq"
    parts = Parts(load="lab.peers.rabbitmq.load")
    about = About("RabbitMQ with durable classic or quorum queues, publisher confirms and manual acks (aio-pika)",
                  colour="#b35806")
    promised = PROMISED
    binary, package = "rabbitmq-server", "rabbitmq-server"
    ports = ("amqp", "dist", "epmd")
    node = "rabbitmq"
    options_declared = (
        TIMEOUT,
        Option("queue_type", "the queues' type (x-queue-type)", "classic or quorum", choice(*QUEUE_TYPES), "classic"),
        Option("confirms", "publisher confirms: a put returns on the broker's basic.ack", "on or off",
               choice(*SWITCH), "on"),
        Option("persistent", "messages published persistent (delivery_mode 2) or transient (1)", "on or off",
               choice(*SWITCH), "on"),
        Option("prefetch", "a reliable consumer's basic.qos prefetch count (0: one basic.get per get instead)",
               "a whole number >= 0", whole(0), 1),
    )

    def __init__(self, world: Any, options: Mapping[str, Any] | None = None):
        super().__init__(world, options)
        # the drain starts once a restarted node is ready (the world settles first); a quorum
        # queue then still replays its log, and its count lags meanwhile
        self.recovery_s = 4.0 if self.options["queue_type"] == "quorum" else 1.0

    def launch(self, place: Place) -> Launch:
        env = environment(place)
        conf = (f"listeners.tcp.default = 127.0.0.1:{place.ports['amqp']}\n"
                "disk_free_limit.absolute = 50MB\n"
                "log.console = true\n"
                "log.file = false\n")
        return Launch(
            [self.executable()], ready=lambda: await_startup(place, env), env=env,
            files={"rabbitmq.conf": conf, "enabled_plugins": "[].\n"},
            pid_file="pid",  # beam.smp's: the script is a wrapper that ignores SIGSTOP's partner SIGCONT
            after_stop=[["epmd", "-port", str(place.ports["epmd"]), "-kill"]],  # epmd -daemon outlives the node
            start_timeout=60.0,  # boot 2-4 s, a restart replays its queues; a shared machine is slower
            # the boot's first Erlang node cannot register with a port mapper whose port
            # another process holds: its net_kernel fails with only this word
            port_taken=("address already in use", "eaddrinuse", "nodistribution"))

    @classmethod
    def executable(cls) -> str:
        """The real start script, never ``/usr/sbin/rabbitmq-server`` (as root it switches to
        the ``rabbitmq`` user and its own log), even where that one is on the PATH."""
        script = BIN / cls.binary
        if not script.exists():
            raise MissingBinary(f"{cls.name}: {script} is not installed: apt-get install {cls.package} "
                                f"(or `make brokers`)")
        return str(script)

    async def declare(self, queues: Sequence[str]) -> None:
        import aio_pika

        host, port = self.address(None)
        arguments: Arguments = {"x-queue-type": "quorum"} if self.options["queue_type"] == "quorum" else None
        connection = await aio_pika.connect(host=host, port=port, timeout=10)
        async with connection:
            channel = await connection.channel()
            for queue in queues:
                await channel.declare_queue(queue, durable=True, arguments=arguments)

    def client(self, rt: Runtime, reliable: bool) -> RabbitmqClient:
        return RabbitmqClient(self, rt, reliable)
