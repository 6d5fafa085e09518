"""What password guessing costs on terminated SASL (``sasl_guard.py``, docs/security.md "Bounds").

Against a real ``BridgeServer`` (``test_server.Running``) with a credentials file: PLAIN's password
KDF runs off the event loop, in a pool with a bound (past it the connection closes unanswered, never
a SASL_AUTHENTICATION_FAILED for a password nobody checked); a failed login is answered after
``sasl.failed_authentication_delay_ms`` (Kafka's 100 ms); an unknown user costs the same KDF (hash
and iterations) as a known one; and failures reach the log as a first line plus a summary per
interval. The KDF is observed by wrapping ``scram._salted_password``, so the tests are about which
thread and which parameters, not about timings on a loaded machine.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from connect_bridge.bridge.metrics import Metrics
from connect_bridge.bridge.security import scram
from connect_bridge.bridge.security.credentials import CredentialStore, save_credentials
from connect_bridge.bridge.security.sasl_client import SaslLoginError, sasl_login
from connect_bridge.bridge.security.sasl_guard import FailedLogins
from connect_bridge.bridge.security.sasl_settings import SaslSettings, UpstreamSasl
from connect_bridge.wire.client import ClientError, KafkaConnection
from test_server import HOST, run, running


@pytest.fixture(scope="module")
def credentials(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """alice with the defaults (both SCRAM mechanisms, 4096 iterations), bob and carol with 8192
    iterations: the store's typical PLAIN check is then SCRAM-SHA-512 at 8192."""
    store = CredentialStore().with_user("alice", "alice-secret")
    for user in ("bob", "carol"):
        store = store.with_user(user, f"{user}-secret", iterations=8192)
    path = tmp_path_factory.mktemp("guard") / "credentials.yaml"
    save_credentials(store, path)
    return path


def terminated(credentials: Path, **extra: Any) -> SaslSettings:
    return SaslSettings(
        mode="terminated", mechanisms=["PLAIN", "SCRAM-SHA-512"], credentials_file=credentials, **extra
    )


class KdfCalls:
    """Wraps ``scram._salted_password``: records (hash, iterations, on the event loop's thread?) and
    can hold every call until released."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, bool]] = []
        self.release = threading.Event()
        self.release.set()
        self.entered = threading.Event()
        self._real = scram._salted_password

    def __call__(self, hash_name: str, password: str, salt: bytes, iterations: int) -> bytes:
        try:
            asyncio.get_running_loop()
            on_loop = True
        except RuntimeError:
            on_loop = False
        self.calls.append((hash_name, iterations, on_loop))
        self.entered.set()
        self.release.wait(10)
        return self._real(hash_name, password, salt, iterations)


@pytest.fixture
def kdf(monkeypatch: pytest.MonkeyPatch) -> Iterator[KdfCalls]:
    calls = KdfCalls()
    monkeypatch.setattr(scram, "_salted_password", calls)
    yield calls
    calls.release.set()


async def plain_login(port: int, user: str, password: str) -> str:
    """'ok', or the failure's text (SaslLoginError: answered; ClientError: closed unanswered)."""
    conn = await KafkaConnection.connect(HOST, port)
    try:
        await sasl_login(conn, UpstreamSasl(mechanism="PLAIN", username=user, password=password))
        return "ok"
    except SaslLoginError as exc:
        return f"answered: {exc}"
    except ClientError as exc:
        return f"closed: {exc}"
    finally:
        await conn.close()


def test_plain_checks_run_off_the_event_loop(credentials: Path, kdf: KdfCalls) -> None:
    with running(sasl=terminated(credentials)) as srv:
        assert run(plain_login(srv.port, "alice", "alice-secret")) == "ok"
        assert "SASL_AUTHENTICATION_FAILED" in run(plain_login(srv.port, "alice", "wrong"))
    assert kdf.calls and not any(on_loop for *_, on_loop in kdf.calls), kdf.calls


def test_an_unknown_user_costs_the_same_kdf_as_a_known_one(credentials: Path, kdf: KdfCalls) -> None:
    with running(sasl=terminated(credentials)) as srv:
        for user in ("bob", "mallory"):  # bob: SCRAM-SHA-512 at 8192, the store's typical check
            assert "SASL_AUTHENTICATION_FAILED" in run(plain_login(srv.port, user, "wrong"))
    known, unknown = ((h, i) for h, i, _ in kdf.calls)
    assert known == ("sha512", 8192)
    assert unknown == known


def test_a_full_check_pool_closes_new_logins_unanswered(credentials: Path, kdf: KdfCalls) -> None:
    metrics = Metrics()
    settings = terminated(credentials, max_pending_password_checks=1, failed_authentication_delay_ms=0)
    with running(sasl=settings, metrics=metrics) as srv:
        kdf.release.clear()  # the first check holds the only place

        async def scenario() -> tuple[str, str]:
            first = asyncio.ensure_future(plain_login(srv.port, "alice", "alice-secret"))
            await asyncio.get_running_loop().run_in_executor(None, kdf.entered.wait, 10)
            second = await plain_login(srv.port, "bob", "bob-secret")
            kdf.release.set()
            return await first, second

        first, second = run(scenario())
        assert first == "ok"
        assert second.startswith("closed"), second  # retriable for a client, not a verdict
        busy = metrics.sasl_authentications.labels(mode="terminated", mechanism="PLAIN", result="busy")
        assert busy._value.get() == 1
        assert run(plain_login(srv.port, "bob", "bob-secret")) == "ok"  # the place is free again


def test_a_failed_login_is_answered_after_the_delay(credentials: Path) -> None:
    with running(sasl=terminated(credentials)) as srv:  # default: Kafka's 100 ms
        started = time.monotonic()
        assert "SASL_AUTHENTICATION_FAILED" in run(plain_login(srv.port, "alice", "wrong"))
        assert time.monotonic() - started >= 0.1


def test_failed_logins_are_logged_first_then_summarised(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        failures = FailedLogins(interval_s=0.05)
        for _ in range(5):
            failures.record("PLAIN", "10.0.0.7")
        failures.record("SCRAM-SHA-512", "10.0.0.7")
        await asyncio.sleep(0.3)

    with caplog.at_level(logging.WARNING, logger="connect_bridge.sasl"):
        asyncio.run(scenario())
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert lines[0].startswith("SASL PLAIN authentication from 10.0.0.7 failed")
    assert lines[1].startswith("SASL SCRAM-SHA-512 authentication from 10.0.0.7 failed")
    assert "SASL: 4 failed PLAIN authentications from 10.0.0.7 in the last 0.05 s" in lines
    assert len(lines) == 3, lines  # nothing held back for SCRAM, and quiet sources stop the timer
