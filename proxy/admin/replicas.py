"""Across replicas: actions on per-process state reach every replica, and overlays are shared.

With Redis (``admin.redis_url``, or ``rate_limits.redis_url`` when ``rate_limits.backend`` is
redis), each replica follows the channel ``manifold:admin``:

- an *action* (restart, drain, undrain, end a session, or a read of what each replica holds for
  itself: its servers, its sessions) is done here first, then published; each
  other replica does it and answers on ``manifold:admin:reply:<id>``. ``PUBLISH`` says how many
  followers heard it, so the asker waits for that many answers, at most ``admin.reply_wait``
  seconds, and says which replicas acted (and which were asked and did not answer);
- *overlays* (tools switched off) live in the hash ``manifold:admin:overlays``, one JSON value
  per overlay; a change is published, and every replica reads the hash again (and every
  :data:`_RESYNC` seconds besides, so a replica that missed a message catches up).

Without Redis, everything is this replica's alone. A Redis failure never ends Manifold: the
action is done here and the answer says Redis could not be reached.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

import anyio
import anyio.abc
import orjson

from proxy.enforce.overlays import Overlay, Overlays

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from proxy.config.model import Config

__all__ = [
    "CHANNEL",
    "OVERLAYS_KEY",
    "Handler",
    "Replicas",
    "Unshared",
    "redis_failures",
    "replica_name",
    "replicas_for",
]

logger = logging.getLogger("proxy.admin.replicas")

CHANNEL: Final = "manifold:admin"
OVERLAYS_KEY: Final = "manifold:admin:overlays"
_REPLY: Final = "manifold:admin:reply:"
_TIMEOUT: Final = 2.0  # seconds one Redis call may take
_RESYNC: Final = 5.0  # seconds between reads of the overlays hash, messages or not
_MAX_MESSAGE: Final = 64 * 1024  # a message bigger than this on the channel is not ours: ignored
_MAX_REPLY: Final = 1024 * 1024  # a replica's answer (a read of its sessions, say) at most this


class Unshared(Exception):
    """Redis, where overlays are shared, could not be reached (the message names the failure)."""


Handler = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]  # (action, arguments) -> result


def replica_name(config: Config) -> str:
    admin = config.admin
    if admin is not None and admin.replica:
        return admin.replica
    return f"{socket.gethostname()}:{os.getpid()}"


@functools.cache
def redis_failures() -> tuple[type[Exception], ...]:
    """What a Redis call raises when Redis cannot be reached or refuses (redis loads lazily)."""
    from redis.exceptions import RedisError

    return (RedisError, OSError, TimeoutError)


class Replicas:
    """This replica's side of the channel; ``client`` None: no Redis, this replica alone."""

    def __init__(
        self,
        name: str,
        overlays: Overlays,
        handle: Handler,
        *,
        client: Redis | None = None,
        listener: Redis | None = None,
        reply_wait: float = 1.0,
    ) -> None:
        self.name = name
        self.overlays = overlays
        self._handle = handle
        self._client = client
        self._listener = listener
        self._reply_wait = reply_wait
        self.following = anyio.Event()  # set once the channel is subscribed (tests wait on it)

    @property
    def shared(self) -> bool:
        return self._client is not None

    @property
    def client(self) -> Redis | None:
        """The Redis these replicas share (None: this replica alone); closed by :meth:`aclose`."""
        return self._client

    # ---- actions ------------------------------------------------------------------------

    async def act(self, action: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Do ``action`` here and on every other replica; what each one said."""
        here = {"replica": self.name, **await self._handle(action, arguments)}
        answer: dict[str, Any] = {"replicas": [here], "unanswered": 0}
        if self._client is None:
            return answer
        request = uuid.uuid4().hex
        message = orjson.dumps(
            {"kind": "act", "id": request, "from": self.name, "action": action, "arguments": arguments}
        )
        try:
            async with self._client.pubsub() as pubsub:
                with anyio.fail_after(_TIMEOUT):
                    await pubsub.subscribe(_REPLY + request)
                    heard = int(await self._client.publish(CHANNEL, message))
                expected = max(0, heard - 1)  # our own follower heard it too, and ignores it
                replies: list[dict[str, Any]] = []
                with anyio.move_on_after(self._reply_wait):
                    while len(replies) < expected:
                        got = await pubsub.get_message(
                            ignore_subscribe_messages=True, timeout=self._reply_wait
                        )
                        if got is not None and isinstance(got.get("data"), bytes):
                            reply = _decoded(got["data"], _MAX_REPLY)
                            if reply is not None:
                                replies.append(reply)
        except redis_failures() as exc:
            logger.error(
                "admin action %s: Redis failed (%s); done on this replica only", action, type(exc).__name__
            )
            answer["problem"] = "Redis could not be reached: done on this replica only"
            return answer
        answer["replicas"] += replies
        answer["unanswered"] = max(0, expected - len(replies))
        return answer

    # ---- overlays -----------------------------------------------------------------------

    async def switch_off(self, overlay: Overlay) -> None:
        """Put ``overlay`` in force here and (with Redis) on every replica.

        Raises:
            ValueError: too many overlays are in force already.
            Unshared: Redis could not be reached; nothing was switched off anywhere.
        """
        if self._client is None:
            self.overlays.add(overlay)
            return
        try:
            await self.resync()
            self.overlays.add(overlay)
            with anyio.fail_after(_TIMEOUT):
                async with self._client.pipeline(transaction=False) as pipe:
                    pipe.hset(OVERLAYS_KEY, overlay.id, orjson.dumps(overlay.to_json()))
                    pipe.publish(CHANNEL, orjson.dumps({"kind": "overlays", "from": self.name}))
                    await pipe.execute()
        except redis_failures() as exc:
            self.overlays.remove_id(overlay.id)
            raise Unshared(type(exc).__name__) from None

    async def switch_on(self, tool: str, role: str | None) -> list[Overlay]:
        """Drop the overlays on ``tool`` (for ``role``; None: all of them) here and everywhere.

        Raises:
            Unshared: Redis could not be reached; nothing was switched on anywhere.
        """
        if self._client is None:
            return self.overlays.remove(tool, role)
        try:
            await self.resync()
            gone = [o for o in self.overlays.active() if o.tool == tool and (role is None or o.role == role)]
            if gone:
                with anyio.fail_after(_TIMEOUT):
                    async with self._client.pipeline(transaction=False) as pipe:
                        pipe.hdel(OVERLAYS_KEY, *[o.id for o in gone])
                        pipe.publish(CHANNEL, orjson.dumps({"kind": "overlays", "from": self.name}))
                        await pipe.execute()
        except redis_failures() as exc:
            raise Unshared(type(exc).__name__) from None
        self.overlays.remove(tool, role)
        return gone

    async def resync(self) -> None:
        """Read the overlays from Redis into this replica (expired ones are dropped there too)."""
        if self._client is None:
            return
        with anyio.fail_after(_TIMEOUT):
            stored = await self._client.hgetall(OVERLAYS_KEY)
        now = time.time()
        live: list[Overlay] = []
        gone: list[bytes | str] = []  # expired, or not an overlay this module wrote
        for field, raw in stored.items():
            try:
                overlay = Overlay.from_json(orjson.loads(raw))
            except (ValueError, orjson.JSONDecodeError):
                gone.append(field)
                continue
            if overlay.until > now:
                live.append(overlay)
            else:
                gone.append(field)
        self.overlays.replace(live)
        if gone:
            with anyio.fail_after(_TIMEOUT):
                await self._client.hdel(OVERLAYS_KEY, *gone)

    # ---- following the channel ----------------------------------------------------------

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Follow the channel until cancelled (without Redis: return at once)."""
        task_status.started()
        if self._listener is None:
            self.following.set()
            return
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._resync_every)
            pause = 0.5
            while True:
                try:
                    async with self._listener.pubsub() as pubsub:
                        await pubsub.subscribe(CHANNEL)
                        await self.resync()
                        self.following.set()
                        pause = 0.5
                        async for message in pubsub.listen():
                            if message.get("type") == "message" and isinstance(message.get("data"), bytes):
                                await self._heard(message["data"])
                except redis_failures() as exc:
                    logger.error(
                        "admin channel: Redis failed (%s); following again in %.1fs",
                        type(exc).__name__,
                        pause,
                    )
                await anyio.sleep(pause)
                pause = min(pause * 2, 30.0)

    async def _resync_every(self) -> None:
        while True:
            await anyio.sleep(_RESYNC)
            try:
                await self.resync()
            except redis_failures() as exc:
                logger.debug("admin overlays: Redis failed (%s)", type(exc).__name__)

    async def _heard(self, raw: bytes) -> None:
        message = _decoded(raw)
        if message is None or message.get("from") == self.name:
            return
        if message.get("kind") == "overlays":
            try:
                await self.resync()
            except redis_failures() as exc:
                logger.warning("admin overlays: Redis failed (%s)", type(exc).__name__)
            return
        request, action, arguments = message.get("id"), message.get("action"), message.get("arguments")
        if message.get("kind") != "act" or not isinstance(request, str) or not isinstance(action, str):
            return
        if not isinstance(arguments, dict):
            return
        try:
            result = {"replica": self.name, **await self._handle(action, arguments)}
        except Exception as exc:  # one replica's failure is its answer, not the channel's end
            logger.exception("admin action %s from %s failed here", action, message.get("from"))
            result = {"replica": self.name, "acted": False, "problem": type(exc).__name__}
        assert self._client is not None
        with anyio.fail_after(_TIMEOUT):
            await self._client.publish(_REPLY + request, orjson.dumps(result))

    async def aclose(self) -> None:
        for client in (self._client, self._listener):
            if client is not None:
                await client.aclose()


def _decoded(raw: bytes, limit: int = _MAX_MESSAGE) -> dict[str, Any] | None:
    if len(raw) > limit:
        return None
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def replicas_for(config: Config, overlays: Overlays, handle: Handler) -> Replicas:
    """The replicas ``config`` shares actions and overlays with (no I/O: Redis connects lazily)."""
    admin = config.admin
    assert admin is not None
    url = admin.redis_url or (config.rate_limits.redis_url if config.rate_limits.backend == "redis" else None)
    name = replica_name(config)
    if url is None:
        return Replicas(name, overlays, handle, reply_wait=admin.reply_wait)
    from redis.asyncio import Redis

    client = Redis.from_url(url, socket_timeout=_TIMEOUT, socket_connect_timeout=_TIMEOUT)
    listener = Redis.from_url(url, socket_connect_timeout=_TIMEOUT, health_check_interval=15)
    return Replicas(name, overlays, handle, client=client, listener=listener, reply_wait=admin.reply_wait)
