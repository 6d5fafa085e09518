"""The metrics/admin listener against a browser, DNS rebinding and slow clients (``admin_access.py``,
``edge.http.start_http``; docs/security.md "Who may call the admin endpoint" and "Bounds").

A loopback peer is not enough for a change: a web page on the bridge's host can POST ``text/plain``
to 127.0.0.1 without a preflight, and a rebound name reaches it too. So the ``Host`` must be a name
of the listener, an ``Origin`` must be the listener's own, and POST needs the token of
``admin_token_file`` (the CLI finds and sends it). And a client sending its request head slowly, or
many clients at once, cannot hold the listener: one deadline for the whole head, and a cap on
connections served at once.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import stat
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from certs import TlsMaterial, tls_material
from connect_bridge.bridge.admin import DRAIN_PATH, HA_PATH, admin_handler
from connect_bridge.bridge.edge.http import start_http
from connect_bridge.bridge.metrics import Metrics
from connect_bridge.bridge.security.admin_access import AdminAccess, AdminTokenError, load_admin_token
from connect_bridge.bridge.security.tls import ListenerTls, ReloadingServerContext
from connect_bridge.cli import main

__all__ = ["tls_material"]  # re-exported fixture

TOKEN = "t0k3n-" + "x" * 40


async def request(
    port: int, method: str, path: str, headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    """One HTTP/1.1 request with exactly ``headers`` (Host defaults to the listener's address)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    sent = {"Host": f"127.0.0.1:{port}", **(headers or {})}
    head = "".join(f"{k}: {v}\r\n" for k, v in sent.items() if v is not None)
    writer.write(f"{method} {path} HTTP/1.1\r\n{head}\r\n".encode())
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    status_line, _, body = answer.partition(b"\r\n\r\n")
    return int(status_line.split()[1]), json.loads(body) if body.startswith(b"{") else body


def serve(
    scenario: Callable[[int, list[str]], Awaitable[Any]], access: AdminAccess | None = None, **options: Any
) -> Any:
    """Run ``scenario(port, reached)`` against a listener whose admin handler records every request
    it is reached with (the bridge runs alone: ``/admin/drain`` answers 409)."""

    async def main_() -> Any:
        reached: list[str] = []
        handler = admin_handler(lambda: None, lambda: None)

        async def recording(method: str, path: str) -> tuple[int, bytes]:
            reached.append(f"{method} {path}")
            return await handler(method, path)

        metrics = Metrics()
        gate = access or AdminAccess(refused=metrics.admin_refused.inc, token=TOKEN)
        http = await start_http(
            "127.0.0.1", 0, metrics, lambda: True, admin=recording, admin_access=gate, **options
        )
        try:
            return await scenario(http.sockets[0].getsockname()[1], reached)
        finally:
            http.close()

    return asyncio.run(main_())


def test_a_cross_site_change_from_loopback_is_refused() -> None:
    """What a web page (CSRF: a foreign Origin, ``text/plain``) or a rebound name (a foreign Host)
    sends never reaches the handler; POST without the token is 401; with it the handler answers."""

    async def scenario(port: int, reached: list[str]) -> list[int]:
        page = {"Origin": "http://evil.example", "Content-Type": "text/plain", "Content-Length": "0"}
        answers = [
            await request(port, "POST", DRAIN_PATH, page),  # a page's form post to 127.0.0.1
            await request(port, "POST", DRAIN_PATH, {**page, "Host": f"evil.example:{port}"}),  # rebinding
            await request(port, "GET", HA_PATH, {"Host": f"evil.example:{port}"}),  # rebinding reads too
            await request(port, "POST", DRAIN_PATH, {"Authorization": f"Bearer {TOKEN}", **page}),
            await request(port, "POST", DRAIN_PATH),  # no token
            await request(port, "POST", DRAIN_PATH, {"Authorization": "Bearer wrong-token"}),
            await request(port, "POST", DRAIN_PATH, {"Authorization": f"Bearer {TOKEN}"}),
            await request(port, "GET", HA_PATH, {"Host": f"localhost:{port}"}),
            await request(port, "GET", HA_PATH, {"Origin": f"http://127.0.0.1:{port}"}),  # same origin
        ]
        assert reached == [f"POST {DRAIN_PATH}", f"GET {HA_PATH}", f"GET {HA_PATH}"], reached
        assert "admin_hosts" in answers[1][1]["message"] and "--admin-token-file" in answers[4][1]["message"]
        return [status for status, _ in answers]

    assert serve(scenario) == [403, 403, 403, 403, 401, 401, 409, 409, 409]


def test_the_cli_finds_and_sends_the_token(tmp_path: Path) -> None:
    """``connect-bridge drain`` reaches the handler with the token it read from the file the bridge
    names (``GET /admin/token-file``), or from ``--admin-token-file``; a wrong token is one line."""
    token_file = tmp_path / "admin.token"
    token = load_admin_token(token_file)
    wrong = tmp_path / "wrong.token"
    wrong.write_text("not-the-token-at-all\n")

    async def scenario(port: int, reached: list[str]) -> list[int]:
        loop = asyncio.get_running_loop()
        found = await loop.run_in_executor(None, main, ["drain", "--admin", f"127.0.0.1:{port}"])
        given = ["drain", "--admin", f"127.0.0.1:{port}", "--admin-token-file", str(token_file)]
        named = await loop.run_in_executor(None, main, given)
        refused = await loop.run_in_executor(None, main, [*given[:-1], str(wrong)])
        assert reached == [f"POST {DRAIN_PATH}"] * 2, reached
        return [found, named, refused]

    access = AdminAccess(token=token, token_file=token_file)
    assert serve(scenario, access) == [1, 1, 1]  # 1: "this bridge runs alone", each time


def test_the_admin_token_file_is_created_private_and_refused_when_others_can_read_it(tmp_path: Path) -> None:
    path = tmp_path / "state" / "admin.token"
    token = load_admin_token(path)
    assert len(token) >= 32 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_admin_token(path) == token  # kept across restarts
    os.chmod(path, 0o644)
    with pytest.raises(AdminTokenError, match="chmod 600"):
        load_admin_token(path)


async def trickle(port: int, lines: int, every_s: float) -> bool:
    """A slowloris client: one header line every ``every_s``; True when the listener closed it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"GET /metrics HTTP/1.1\r\n")
        for i in range(lines):
            await asyncio.sleep(every_s)
            writer.write(f"X-Slow-{i}: 1\r\n".encode())
            await writer.drain()
            if reader.at_eof():
                return True
        return await asyncio.wait_for(reader.read(), 1) == b""
    except (ConnectionError, TimeoutError):
        return True
    finally:
        writer.close()


def test_a_slow_request_head_is_cut_off_and_connections_are_capped() -> None:
    async def scenario(port: int, reached: list[str]) -> tuple[list[bool], int, int]:
        slow = await asyncio.gather(*(trickle(port, 8, 0.25) for _ in range(3)))  # 2 s of head each
        idle = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
        await asyncio.sleep(0.1)
        try:  # the cap (3) is taken by idle clients: 503 at once (or a reset: the request unread)
            over = (await request(port, "GET", "/livez"))[0]
        except ConnectionResetError:
            over = 503
        await asyncio.sleep(0.8)  # past their deadline: closed, the places free again
        after, _ = await request(port, "GET", "/livez")
        for _, writer in idle:
            writer.close()
        return slow, over, after

    slow, over, after = serve(scenario, max_connections=3, request_timeout_s=0.5)
    assert slow == [True, True, True]
    assert (over, after) == (503, 200)


def test_connections_that_never_finish_the_tls_handshake_are_counted_and_timed_out(
    tls_material: TlsMaterial,
) -> None:
    """With ``metrics_tls``, a socket that never starts its TLS handshake used to be held for the
    handshake timeout counted against nothing (the cap counted only connections past their
    handshake). Now it takes a place at accept: with a cap of 8, at most 2 from one address (a
    quarter) are held in a handshake and the others are closed at once; those held are closed at the
    deadline, and an HTTPS client from another address is served meanwhile."""
    server_context = ReloadingServerContext(
        ListenerTls(certfile=tls_material.server_cert, keyfile=tls_material.server_key)
    ).context
    client_context = ssl.create_default_context(cafile=str(tls_material.ca_cert))

    async def silent_until_closed(port: int, within: float) -> float | None:
        """Seconds until the listener closed a socket that sends nothing, or None if it did not."""
        reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.2", 0))
        started = time.monotonic()
        try:
            await asyncio.wait_for(reader.read(), within)
            return time.monotonic() - started
        except ConnectionError:
            return time.monotonic() - started
        except TimeoutError:
            return None
        finally:
            writer.close()

    async def scenario(port: int, reached: list[str]) -> tuple[list[float | None], int]:
        silent = [asyncio.ensure_future(silent_until_closed(port, 10)) for _ in range(10)]
        await asyncio.sleep(0.3)  # all accepted, none past its handshake

        def get() -> int:
            url = f"https://127.0.0.1:{port}/livez"
            with urllib.request.urlopen(url, context=client_context, timeout=5) as response:
                return int(response.status)

        served = await asyncio.to_thread(get)
        return list(await asyncio.gather(*silent)), served

    closed, served = serve(scenario, ssl=server_context, max_connections=8, request_timeout_s=2.0)
    assert served == 200
    assert all(seconds is not None for seconds in closed), closed  # none held past the deadline
    at_once = [seconds for seconds in closed if seconds is not None and seconds < 1.0]
    assert len(at_once) >= 8, closed  # only 2 of the 8 places for one address in a handshake
