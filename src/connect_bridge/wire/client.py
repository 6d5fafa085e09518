"""A small asyncio Kafka-protocol client: one connection, pipelined requests, typed responses.

Used by ``connect-bridge describe``, the new-protocol worker client, tests and benchmarks. Requests
are encoded and responses decoded by the same JSON-spec engine the server uses.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl as ssl_module
import struct
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from kafka.protocol.api_message import ApiMessage

from connect_bridge.codecs import messages as m
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.codecs.requests import decode_response, encode_request

_SIZE = struct.Struct(">i")
_TLS_RECORDS = (b"\x15\x03", b"\x16\x03")
"""A TLS alert or handshake record header: a TLS server answering a plaintext client, whose
"frame size" would read as some 350 MB."""


Login = Callable[["KafkaConnection"], Awaitable[object]]
"""What runs on a new connection before its first request: the bridge's SASL login on an upstream
listener (``bridge.security.sasl_client.upstream_login``). Handed in, so this layer knows no
settings and no credentials."""


class ClientError(ConnectionError):
    """The connection failed or closed before the response arrived."""


class HttpAnswerError(ClientError):
    """The server answered in HTTP: an HTTP port (a metrics listener), not a Kafka listener."""


FIND_COORDINATOR_VERSION = 4
"""FindCoordinator v4: batched keys, which every Kafka 3.0+ (and the bridge) answers."""
GROUP_KEY_TYPE = 0


async def find_coordinator(
    bootstrap: Sequence[tuple[str, int]],
    group_id: str,
    connect: Callable[[str, int], Awaitable[KafkaConnection]],
    timeout_s: float,
) -> tuple[str, int]:
    """The group's coordinator as the first bootstrap address that names it (``connect`` opens a
    connection with the caller's identity and security). Raises ``ClientError`` saying why when
    none does: the caller retries later."""
    last = "no bootstrap address"
    for host, port in bootstrap:
        try:
            conn = await connect(host, port)
        except (OSError, TimeoutError) as exc:
            last = f"{host}:{port}: {exc}"
            continue
        try:
            request = m.FindCoordinatorRequest(key_type=GROUP_KEY_TYPE, coordinator_keys=[group_id])
            answer = await conn.request(request, FIND_COORDINATOR_VERSION, timeout=timeout_s)
            (found,) = answer.coordinators
            if found.error_code == ErrorCode.NONE:
                return found.host, found.port
            last = f"{host}:{port} answered {ErrorCode(found.error_code).name}"
        except (OSError, TimeoutError) as exc:
            last = f"{host}:{port}: {exc}"
        finally:
            await conn.close()
    raise ClientError(f"no coordinator found for {group_id}: {last}")


class KafkaConnection:
    """One pipelined connection: responses are matched to requests by correlation id."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: str) -> None:
        self.reader = reader
        self.writer = writer
        self.client_id = client_id
        self._correlation = 0
        self._pending: dict[int, tuple[int, int, asyncio.Future[Any]]] = {}
        self._reader_task = asyncio.get_running_loop().create_task(self._read_loop())

    @classmethod
    async def connect(
        cls,
        host: str,
        port: int,
        client_id: str = "connect-bridge",
        timeout: float = 10.0,
        ssl: ssl_module.SSLContext | None = None,
        login: Login | None = None,
    ) -> KafkaConnection:
        """Connect (over TLS with ``ssl``: the certificate must name ``host``, unless the context
        does not check hostnames), and run ``login`` on it before it is handed out (its errors,
        e.g. ``sasl_client.SaslLoginError``, close the connection and go to the caller)."""
        hostname = host if ssl is not None else None
        opened = asyncio.open_connection(host, port, ssl=ssl, server_hostname=hostname)
        reader, writer = await asyncio.wait_for(opened, timeout)
        conn = cls(reader, writer, client_id)
        if login is not None:
            try:
                await asyncio.wait_for(login(conn), timeout)
            except BaseException:
                await conn.close()
                raise
        return conn

    async def request(self, message: ApiMessage, version: int, timeout: float | None = 30.0) -> Any:
        """Send ``message`` at ``version`` and wait for its response."""
        if self._reader_task.done():
            raise ClientError("connection closed")
        self._correlation += 1
        correlation = self._correlation
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[correlation] = (message.API_KEY, version, future)
        self.writer.write(encode_request(message, version, correlation, self.client_id))
        await self.writer.drain()
        return await asyncio.wait_for(future, timeout)

    async def _read_loop(self) -> None:
        try:
            while True:
                prefix = await self.reader.readexactly(4)
                if prefix[:2] in _TLS_RECORDS:
                    raise ClientError("the server speaks TLS on this port (connect with TLS)")
                if prefix == b"HTTP":  # "HTTP/1.1 400": some 1.2 GB as a frame size
                    raise HttpAnswerError("the server speaks HTTP on this port, not Kafka's protocol")
                (size,) = _SIZE.unpack(prefix)
                frame = await self.reader.readexactly(size)
                (correlation,) = _SIZE.unpack_from(frame, 0)
                entry = self._pending.pop(correlation, None)
                if entry is None:
                    raise ClientError(f"unexpected correlation id {correlation}")
                api_key, version, future = entry
                if not future.done():
                    try:
                        future.set_result(decode_response(api_key, version, frame, framed=False))
                    except Exception as exc:  # a malformed response fails that request only
                        future.set_exception(exc)
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            self._fail(ClientError(f"connection closed: {exc}"))
        except ClientError as exc:
            self._fail(exc)

    def _fail(self, exc: Exception) -> None:
        for _, _, future in self._pending.values():
            if not future.done():
                future.set_exception(exc)
        self._pending.clear()

    async def close(self) -> None:
        """Close and stop reading; requests still waiting fail with ClientError."""
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()
        self._reader_task.cancel()
        with contextlib.suppress(BaseException):
            await self._reader_task
