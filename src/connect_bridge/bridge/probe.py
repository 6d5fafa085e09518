"""The container's health check: ``python -m connect_bridge.bridge.probe CONFIG [PATH]``.

Asks ``/livez`` (or PATH, e.g. ``/readyz``) on the metrics listener that CONFIG (the bridge's own
``bridge.yaml``) configures, over HTTPS when it sets ``metrics_tls``: a fixed ``http://`` URL in the
Dockerfile would fail against a bridge whose metrics port speaks TLS, and would not follow a moved
``metrics_listen``. Exit 0 on a 200, 1 otherwise with one line saying why.

The probe runs beside the bridge and talks to it on loopback, so it does not verify the server's
certificate (it checks the bridge is alive, not who it is). With ``metrics_tls.client_auth:
required`` the probe presents the bridge's own certificate (``certfile``/``keyfile``): it must then
chain to ``metrics_tls.cafile`` and allow client use (extended key usage ``clientAuth``), or the
health check must be overridden. With ``requested`` the probe connects without one.
"""

from __future__ import annotations

import ssl
import sys
import urllib.error
import urllib.request
from pathlib import Path

from connect_bridge.bridge.settings import BridgeSettings, SettingsError, load_settings

TIMEOUT_S = 4.0
_ANY_ADDRESS = {"", "0.0.0.0", "::", "[::]"}


def probe_url(settings: BridgeSettings, path: str = "/livez") -> str | None:
    """The URL the probe asks, or None with ``metrics_listen: off``."""
    if settings.metrics_address is None:
        return None
    host, port = settings.metrics_address
    host = "127.0.0.1" if host in _ANY_ADDRESS else host
    host = f"[{host}]" if ":" in host else host
    scheme = "https" if settings.metrics_tls is not None else "http"
    return f"{scheme}://{host}:{port}{path}"


def client_context(settings: BridgeSettings) -> ssl.SSLContext | None:
    """The probe's TLS context (None without ``metrics_tls``)."""
    tls = settings.metrics_tls
    if tls is None:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if tls.client_auth == "required":
        password = tls.key_password.get_secret_value() if tls.key_password is not None else None
        context.load_cert_chain(tls.certfile, tls.keyfile, password)
    return context


def check(config: Path, path: str = "/livez") -> str | None:
    """None when the bridge answered 200, else why not (one line)."""
    try:
        settings = load_settings(config)
    except SettingsError as exc:
        return str(exc)
    url = probe_url(settings, path)
    if url is None:
        return "metrics_listen is off: nothing to probe (disable the health check)"
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S, context=client_context(settings)) as answer:
            return None if answer.status == 200 else f"{url}: HTTP {answer.status}"
    except (OSError, ssl.SSLError, urllib.error.URLError) as exc:
        return f"{url}: {exc}"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not 1 <= len(args) <= 2:
        print("usage: python -m connect_bridge.bridge.probe CONFIG [PATH]", file=sys.stderr)
        return 2
    problem = check(Path(args[0]), *args[1:])
    if problem is not None:
        print(f"unhealthy: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
