"""``connect-bridge serve``: wire settings, record store, server, metrics and config view together."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from connect_bridge.bridge.admin import admin_handler
from connect_bridge.bridge.edge import sd_notify
from connect_bridge.bridge.edge.accept import Listener
from connect_bridge.bridge.edge.http import start_http
from connect_bridge.bridge.metrics import Metrics
from connect_bridge.bridge.security.acls import AclFileError
from connect_bridge.bridge.security.admin_access import AdminAccess, AdminTokenError, load_admin_token
from connect_bridge.bridge.security.authorization import (
    GroupAuthorizer,
    authorizer_from_settings,
    fetch_upstream_rules,
    refresh_from_upstream,
)
from connect_bridge.bridge.security.exposure import admin_exposure_warning, listener_exposure_warning
from connect_bridge.bridge.security.tls import ReloadingServerContext, TlsError
from connect_bridge.bridge.security.upstream_security import UpstreamSecurity, upstream_security
from connect_bridge.bridge.server import BridgeServer, ServerOptions
from connect_bridge.bridge.settings import BridgeSettings
from connect_bridge.bridge.startup import StartupError, bind_error
from connect_bridge.bridge.stores.config_source import ConfigViewWatcher, ViewDelivery
from connect_bridge.bridge.stores.config_topic import ConfigTopicWatcher
from connect_bridge.bridge.stores.partitioned_store import PartitionedTopicStore
from connect_bridge.bridge.stores.store import FileRecordStore, RecordStore, StoreError
from connect_bridge.bridge.stores.topic_store import TopicRecordStore
from connect_bridge.logs import configure_logging

log = logging.getLogger("connect_bridge.app")


def coordinated_groups(settings: BridgeSettings) -> list[str] | None:
    """The groups the bridge coordinates. In front of a cluster, without an explicit setting, the
    Connect group the config view names (exactly) rather than ``connect.*``, the narrowest choice.
    A consumer group matching the pattern (a sink connector's ``connect-<connector>``) is the
    broker's anyway: it joins with protocol type ``consumer`` (``BridgeServer._coordinates``)."""
    if settings.coordinated_groups is not None or not settings.upstream:
        return settings.coordinated_groups
    view = settings.config_view
    if view is not None and view.group is not None:
        return [re.escape(view.group)]
    return None


_PASSED_AS_IS = (
    "advertised_host",
    "advertised_port",
    "max_frame_bytes",
    "max_connections",
    "idle_timeout_ms",
    "proxy_base_port",
    "advertised_proxy_base_port",
    "upstream_start_timeout_ms",
    "upstream_metadata_refresh_ms",
    "state_topic",
    "connections",
)
"""Settings that are ``ServerOptions`` fields of the same name and meaning."""
_SERVER_LIMITS = ("max_inflight_per_connection", "max_buffered_bytes", "heartbeat_cache_bytes")
"""``limits.*`` settings that bound the server rather than one request (``to_limits`` has those)."""


def server_options(
    settings: BridgeSettings,
    security: UpstreamSecurity | None = None,
    tls: ReloadingServerContext | None = None,
) -> ServerOptions:
    """The server's options: the settings that pass as they are, and the ones derived here
    (``security`` and ``tls``: the contexts ``tls_contexts`` built from the settings)."""
    host, port = settings.listen_address
    view = settings.config_view
    return ServerOptions(
        host=host,
        port=port,
        tls=tls,
        upstream_security=security or UpstreamSecurity(),
        sasl=settings.sasl if settings.sasl.enabled else None,
        config_group=view.group if view is not None else None,
        coordinator=settings.coordinator.to_config(),
        upstream=list(settings.upstream_addresses),
        coordinated_groups=coordinated_groups(settings),
        adoption=settings.adoption if settings.adoption.enabled else None,
        ha=settings.ha if settings.ha.enabled else None,
        limits=settings.limits.to_limits(),
        **{name: getattr(settings, name) for name in _PASSED_AS_IS},
        **{name: getattr(settings.limits, name) for name in _SERVER_LIMITS},
    )


def open_store(settings: BridgeSettings, security: UpstreamSecurity | None = None) -> RecordStore:
    """The state topic in front of a cluster when one is named (state survives the host), else the
    state directory. Raises ``StoreError`` (a locked directory, an unreachable cluster)."""
    if settings.state_topic and settings.upstream and settings.ha.enabled:
        return PartitionedTopicStore.open(
            settings.upstream_bootstrap,
            settings.state_topic,
            partitions=settings.ha.partitions,
            transactional_id_prefix=settings.ha.transactional_id_prefix,
            client_options=(security or UpstreamSecurity()).kafka_python_options(),
        )
    if settings.state_topic and settings.upstream:
        options = (security or UpstreamSecurity()).kafka_python_options()
        return TopicRecordStore.open(
            settings.upstream_bootstrap, settings.state_topic, client_options=options
        )
    return FileRecordStore.open(settings.state_dir)


def config_watcher(settings: BridgeSettings, security: UpstreamSecurity | None = None) -> ViewDelivery | None:
    """The source of the config view: Connect's config topic, or a watched JSON file, or none."""
    view = settings.config_view
    if view is not None and view.topic is not None:
        options = (security or UpstreamSecurity()).kafka_python_options()
        return ConfigTopicWatcher(
            settings.upstream_bootstrap, view.topic, view.poll_interval_ms, client_options=options
        )
    if view is not None and view.file is not None:
        return ConfigViewWatcher(view.file, view.poll_interval_ms)
    return None


def tls_contexts(
    settings: BridgeSettings,
) -> tuple[ReloadingServerContext | None, ReloadingServerContext | None, UpstreamSecurity]:
    """The TLS contexts of the worker/proxy listeners, the metrics listener and the upstream
    connections, built before anything is opened: a certificate that cannot be used (missing,
    mismatched, a wrong key password) stops the start with one line naming the file."""
    try:
        listener = ReloadingServerContext(settings.tls, "tls") if settings.tls is not None else None
        metrics = (
            ReloadingServerContext(settings.metrics_tls, "metrics_tls")
            if settings.metrics_tls is not None
            else None
        )
        return listener, metrics, upstream_security(settings.upstream_tls, settings.upstream_sasl)
    except TlsError as exc:
        raise StartupError(str(exc)) from None


def group_authorizer(settings: BridgeSettings, metrics: Metrics) -> GroupAuthorizer | None:
    """The group authorizer (``authorization:``), before anything is opened: an ACL file that
    cannot be used stops the start with one line naming the file and line."""
    try:
        return authorizer_from_settings(settings.authorization, metrics)
    except AclFileError as exc:
        raise StartupError(str(exc)) from None


def start_acl_refresh(
    server: BridgeServer,
    settings: BridgeSettings,
    authorizer: GroupAuthorizer | None,
    security: UpstreamSecurity,
) -> None:
    """``authorization.from_upstream``: read the upstream cluster's group ACLs now and every
    ``refresh_ms``, as the bridge's own identity (its TLS and ``upstream_sasl``)."""
    if authorizer is None or not settings.authorization.from_upstream:
        return
    fetch = functools.partial(
        fetch_upstream_rules, settings.upstream_bootstrap, security.kafka_python_options()
    )
    refresh = refresh_from_upstream(authorizer, fetch, settings.authorization.refresh_ms)
    server.supervise(refresh, "the upstream ACL refresh")


def check_settings(settings: BridgeSettings) -> str:
    """``serve --check``: every file the start would read (certificates and keys, the ACL file, the
    SASL credentials file, an existing admin token file) is read and checked now, and nothing is
    bound, created or connected to. Returns the one line ``serve --check`` prints; raises
    ``StartupError`` with the one line a start would fail with."""
    from connect_bridge.bridge.security.acls import load_acl_file
    from connect_bridge.bridge.security.credentials import CredentialsError, load_credentials

    tls_contexts(settings)
    if settings.authorization.enabled and settings.authorization.acl_file is not None:
        try:
            load_acl_file(settings.authorization.acl_file)
        except AclFileError as exc:
            raise StartupError(str(exc)) from None
    if settings.sasl.mode == "terminated" and settings.sasl.credentials_file is not None:
        try:
            load_credentials(settings.sasl.credentials_file)
        except CredentialsError as exc:
            raise StartupError(f"sasl.credentials_file: {exc}") from None
    if settings.metrics_address is not None and settings.admin_token_path.exists():
        try:
            load_admin_token(settings.admin_token_path)
        except AdminTokenError as exc:
            raise StartupError(str(exc)) from None
    metrics = "off" if settings.metrics_address is None else settings.metrics_listen
    state = (
        f"state topic {settings.state_topic}"
        if settings.state_topic and settings.upstream
        else f"state in {settings.state_dir}"
    )
    upstream = f"upstream {settings.upstream_bootstrap}" if settings.upstream else "embedded"
    return f"configuration ok: listen {settings.listen}, metrics {metrics}, {upstream}, {state}"


def _created_by_start(path: Path) -> Path | None:
    """The outermost directory of ``path`` (itself included) that does not exist yet, so that a
    start that fails can remove what it made (``state_dir`` and its parents), or None."""
    missing = None
    for candidate in (path, *path.parents):
        if candidate.exists():
            break
        missing = candidate
    return missing


def _remove_created(created: Path | None) -> None:
    """Remove the directory a failed start created (it holds only the lock, the admin token and an
    empty log: no state was served); a failure to remove it is not the failure to report."""
    if created is not None and created.is_dir():
        shutil.rmtree(created, ignore_errors=True)


async def run(settings: BridgeSettings) -> str | None:
    """Serve until SIGTERM/SIGINT or a failure that stops the bridge (returned, one line).

    The first stdout line says where it listens (tools read it)."""
    listener_tls, metrics_tls, security = tls_contexts(settings)
    metrics = Metrics(group_ids=settings.metrics_group_ids)
    authorizer = group_authorizer(settings, metrics)
    created = _created_by_start(settings.state_dir.absolute())
    store = open_store(settings, security)  # holds the state directory's lock from here on
    options = dataclasses.replace(server_options(settings, security, listener_tls), authorizer=authorizer)
    server = BridgeServer(options, store, metrics)
    http = None
    try:
        # Both ports are bound before anything is announced: the metrics port first, because it
        # is cheap to check and the server's start may wait for an upstream cluster.
        http = await _start_metrics_http(settings, server, metrics, metrics_tls)
        await server.start()
    except BaseException:
        if http is not None:
            http.close()
        with contextlib.suppress(Exception):  # the start's own error is the one to report
            store.close()  # releases the state directory's lock
        # Only a start that held the lock removes what it created: a bridge that lost the race for
        # a fresh directory must not delete the winner's.
        _remove_created(created)
        raise
    server.install_signal_handlers()
    watch_task = None
    watcher = config_watcher(settings, security)
    if watcher is not None:
        server.config_refresh = watcher.refresh
        watch_task = server.supervise(watcher.watch(server.set_config_view), "the config view watcher")
    start_acl_refresh(server, settings, authorizer, security)
    exposed = listener_exposure_warning(
        server.options.host,
        server.port,
        listener_tls is not None,
        settings.sasl.enabled,
        settings.tls is not None and settings.tls.client_auth == "required",
    )
    if exposed is not None:
        log.warning(exposed)
    print(f"connect-bridge listening on {server.options.host}:{server.port}", flush=True)
    ready_task = asyncio.get_running_loop().create_task(_notify_when_ready(server), name="sd_notify")
    try:
        await server.serve_until_stopped()
    finally:
        ready_task.cancel()
        sd_notify.notify(sd_notify.STOPPING)
        if watcher is not None:
            watcher.stop()
        if watch_task is not None:
            watch_task.cancel()
            with contextlib.suppress(BaseException):
                await watch_task
        if http is not None:
            http.close()
    return server.failure


async def _notify_when_ready(server: BridgeServer, poll_s: float = 0.05) -> None:
    """Tell systemd (``Type=notify``) the bridge is up once it really serves: the record store
    replayed and the listener bound, the moment ``/readyz`` turns 200. Not before: units ordered
    after the bridge (the Connect workers) would otherwise start against a bridge that answers
    COORDINATOR_LOAD_IN_PROGRESS. A bridge that fails first never announces itself."""
    while not server.ready:
        if server.failure is not None:
            return
        await asyncio.sleep(poll_s)
    sd_notify.notify(sd_notify.READY, f"STATUS=serving on {server.options.host}:{server.port}")


async def _start_metrics_http(
    settings: BridgeSettings,
    server: BridgeServer,
    metrics: Metrics,
    metrics_tls: ReloadingServerContext | None,
) -> Listener | None:
    """The /metrics, probe and admin listener (None when ``--metrics-listen off``), bound before the
    bridge's own port so that a port in use fails ``serve`` before it waits for an upstream."""
    if settings.metrics_address is None:
        return None
    mhost, mport = settings.metrics_address
    token_file = settings.admin_token_path
    try:
        token = load_admin_token(token_file)
    except AdminTokenError as exc:
        raise StartupError(str(exc)) from None
    access = AdminAccess(
        settings.admin_allow_remote,
        metrics.admin_refused.inc,
        token=token,
        token_file=token_file.resolve(),
        hosts=[*settings.admin_hosts, mhost],
    )
    try:
        http = await start_http(
            mhost,
            mport,
            metrics,
            lambda: server.ready,
            ssl=metrics_tls.context if metrics_tls else None,
            admin=admin_handler(lambda: server.adoption, lambda: server),
            admin_access=access,
            max_connections=settings.metrics_max_connections,
            request_timeout_s=settings.metrics_request_timeout_ms / 1000,
        )
    except OSError as exc:
        fix = "--metrics-listen (off disables it)"
        raise bind_error("serve metrics", mhost, mport, exc, fix) from None
    log.info("metrics on http://%s:%d/metrics", mhost, http.sockets[0].getsockname()[1])
    opened = admin_exposure_warning(mhost, http.sockets[0].getsockname()[1], settings.admin_allow_remote)
    if opened is not None:
        log.warning(opened)
    return http


def loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop ``serve`` runs on. uvloop (libuv) relays and answers with less overhead per
    request than asyncio's pure-Python loop; the server code is the same on both."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise OSError("event_loop: uvloop is not installed (pip install uvloop)") from None
        return None
    return uvloop.new_event_loop


def main(settings: BridgeSettings) -> int:
    """Serve; 0 after a clean stop, 1 when the bridge could not start or stopped itself.

    A failure to start (a port in use, a locked state directory, an unreachable upstream) is one
    ``connect-bridge: cannot start: ...`` line on stderr, the same shape as every CLI error."""
    configure_logging()  # INFO when run without the CLI; the CLI's --log-level / -q / -v otherwise
    try:
        with asyncio.Runner(loop_factory=loop_factory(settings.event_loop)) as runner:
            failure = runner.run(run(settings))
    except (StartupError, StoreError, OSError) as exc:  # ports, the state lock, upstream, uvloop
        print(f"connect-bridge: cannot start: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0 if failure is None else 1
