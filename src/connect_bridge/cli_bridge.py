"""The bridge-side commands of ``connect-bridge``: serve, describe, credentials, adopt, release, drain.

``cli.py`` holds the command table and the parser; the handlers of commands that run or talk to a
bridge live here, the drill and analysis ones in ``cli.py``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from connect_bridge.cli_admin import AdminEndpoint, AdminError, admin_endpoint, admin_request
from connect_bridge.cli_common import fail


def cmd_serve(args: argparse.Namespace) -> int:
    from pathlib import Path

    from connect_bridge.bridge import app
    from connect_bridge.bridge.settings import SettingsError, load_settings

    overrides = {
        "listen": args.listen,
        "state_dir": args.state_dir,
        "upstream": args.upstream,
        "metrics_listen": args.metrics_listen,
        "config_view.file": args.config_view,
    }
    try:
        settings = load_settings(Path(args.config) if args.config else None, overrides)
    except SettingsError as exc:
        return fail(str(exc))
    if args.check:
        from connect_bridge.bridge.startup import StartupError

        try:
            print(app.check_settings(settings))
        except StartupError as exc:
            return fail(f"cannot start: {exc}")
        return 0
    return app.main(settings)


def _read_password(env_var: str | None, user: str) -> str:
    """The password of ``credentials add``: from the environment variable ``--password-env`` names,
    else the first line of stdin. Never from argv, which ``ps`` and shell histories show."""
    import os

    if env_var:
        password = os.environ.get(env_var)
        if password is None:
            raise ValueError(f"--password-env: the environment variable {env_var} is not set")
        return password
    if sys.stdin.isatty():
        import getpass

        return getpass.getpass(f"password for {user}: ")
    return sys.stdin.readline().rstrip("\r\n")


def cmd_credentials_add(args: argparse.Namespace) -> int:
    from pathlib import Path

    from connect_bridge.bridge.security.credentials import CredentialsError, add_user

    try:
        password = _read_password(args.password_env, args.user)
        mechanisms = args.mechanism or ["SCRAM-SHA-256", "SCRAM-SHA-512"]
        add_user(Path(args.file), args.user, password, mechanisms, args.iterations)
    except (CredentialsError, ValueError) as exc:  # a bad file, an empty password, bad iterations
        return fail(str(exc))
    except OSError as exc:  # a directory that does not exist or cannot be written
        return fail(f"{args.file}: cannot write the credentials file: {exc.strerror or exc}")
    print(f"{args.file}: {args.user} ({', '.join(mechanisms)})")
    return 0


def _describe_tls(args: argparse.Namespace) -> Any:
    """The client TLS context ``describe`` uses towards a bridge whose listener has ``tls:``: on
    with ``--tls``, ``--ca-file`` or ``--cert`` (``--cert``/``--key`` when the listener requires a
    client certificate); None for a plaintext listener."""
    if not (args.tls or args.ca_file or args.cert or args.key):
        return None
    from connect_bridge.bridge.security.tls import UpstreamTls, client_context

    try:
        settings = UpstreamTls(cafile=args.ca_file, certfile=args.cert, keyfile=args.key)
    except ValueError:
        raise ValueError("--cert and --key go together (a client certificate needs its key)") from None
    return client_context(settings, "describe")


def _describe_sasl(args: argparse.Namespace) -> Any:
    """The SASL login ``describe`` uses towards a bridge whose listener has ``sasl:`` (``--sasl-user``;
    the password as ``credentials add`` reads it), or None."""
    if not args.sasl_user:
        return None
    from connect_bridge.bridge.security.sasl_settings import UpstreamSasl

    password = _read_password(args.password_env, args.sasl_user)
    if not password:
        raise ValueError("the password must not be empty")
    return UpstreamSasl(mechanism=args.sasl_mechanism, username=args.sasl_user, password=password)


_COMMAND_LINE_SECURITY = ("tls", "sasl_user", "password_env")
"""``describe``'s own security options, which ``--command-config`` replaces (``--ca-file``,
``--cert`` and ``--key`` then serve ``--admin`` only)."""


def _describe_security(args: argparse.Namespace) -> tuple[Any, Any]:
    """The (TLS context, SASL login) towards the bridge: from ``--command-config`` (Kafka client
    properties, ``cli_client_config``), else from ``describe``'s own options. ValueError: one line."""
    if args.command_config is None:
        return _describe_tls(args), _describe_sasl(args)
    from pathlib import Path

    from connect_bridge.cli_client_config import client_security

    given = [f"--{name.replace('_', '-')}" for name in _COMMAND_LINE_SECURITY if getattr(args, name)]
    if given:
        raise ValueError(
            f"--command-config and {', '.join(given)} both say how to connect: put it all in the "
            "properties file (security.protocol, ssl.*, sasl.*)"
        )
    security = client_security(Path(args.command_config))
    return security.ssl, security.sasl


def _speaks_http(host: str, port: int) -> bool:
    """Whether ``host:port`` answers a plain HTTP request: ``describe`` aimed at the bridge's
    ``metrics_listen`` (or any HTTP port) gets no Kafka answer there, only a closed connection."""
    import socket

    try:
        with socket.create_connection((host, port), timeout=3.0) as probe:
            probe.sendall(b"HEAD / HTTP/1.0\r\nHost: " + host.encode("ascii", "replace") + b"\r\n\r\n")
            return probe.recv(5).startswith(b"HTTP/")
    except (OSError, UnicodeError):
        return False


def _group_argument(args: argparse.Namespace) -> str | None:
    """The group of ``describe GROUP`` or ``describe --group GROUP`` (Kafka's spelling)."""
    if args.group and args.group_option and args.group != args.group_option:
        raise ValueError(f"two groups given, {args.group!r} and --group {args.group_option!r}: name one")
    return args.group or args.group_option


def cmd_describe(args: argparse.Namespace) -> int:
    import asyncio

    from connect_bridge.bridge.describe import describe, render_members, render_table
    from connect_bridge.bridge.settings import parse_host_port
    from connect_bridge.bridge.startup import StartupError, reason
    from connect_bridge.codecs.error_codes import ErrorCode
    from connect_bridge.wire.client import HttpAnswerError

    try:
        host, port = parse_host_port(args.bootstrap)
    except ValueError as exc:
        return fail(f"--bootstrap-server: {exc}")
    try:
        args.group = _group_argument(args)
        context, login = _describe_security(args)
    except ValueError as exc:  # TlsError, CommandConfigError, an unset --password-env: one line each
        return fail(str(exc))
    try:
        groups = asyncio.run(describe(host, port, args.group, ssl=context, sasl=login))
    except StartupError as exc:  # SaslLoginError: the bridge (or its cluster) refused the login
        login_option = "--command-config" if args.command_config else "--sasl-user"
        return fail(str(exc).replace("upstream_sasl: ", f"{login_option}: ", 1))
    except OSError as exc:  # refused, timed out, closed mid-answer, a refused TLS handshake
        if isinstance(exc, HttpAnswerError) or (context is None and _speaks_http(host, port)):
            return fail(
                f"{args.bootstrap} is an HTTP port (the bridge's metrics_listen?), not its Kafka "
                "listener: --bootstrap-server is the bridge's listen address (default 127.0.0.1:9092)"
            )
        return fail(
            f"cannot describe through {args.bootstrap}: {reason(exc)}; is `connect-bridge serve` "
            "listening there? (--bootstrap-server is the bridge's listen address)"
        )
    task_clients: list[dict[str, str]] = []
    if args.admin:
        try:
            endpoint = admin_endpoint(
                args.admin, args.ca_file, args.cert, args.key, tls_options_are_for_admin=False
            )
            _, adoption = admin_request(endpoint, "GET", "/admin/groups", 10.0)
            ha_status, ha = admin_request(endpoint, "GET", "/admin/ha", 10.0)
            relay_status, relay = admin_request(endpoint, "GET", "/admin/relay", 10.0)
        except AdminError as exc:
            return fail(str(exc))
        if relay_status == 200:
            task_clients = relay.get("task_clients", [])
        for g in groups:
            if g.get("group_id") in adoption:
                g["adoption"] = adoption[g["group_id"]]
            if ha_status == 200:
                g["ha"] = group_placement(ha, g["group_id"])
        if ha_status == 200 and args.group and groups and groups[0].get("ha", {}).get("owner"):
            owner = groups[0]["ha"]["owner"]
            if owner["node_id"] != ha["node_id"] and groups[0].get("error_code"):
                return fail(
                    f"group {args.group!r} is coordinated by bridge node {owner['node_id']} on "
                    f"{owner['host']}, not by this bridge (node {ha['node_id']}); describe it there"
                )
    if args.group and all(g.get("error_code") == ErrorCode.GROUP_ID_NOT_FOUND for g in groups):
        return fail(
            f"group {args.group!r} not found on the bridge at {args.bootstrap}; "
            "`connect-bridge describe` without a group lists every group"
        )
    if args.json:
        print(json.dumps(groups, indent=2))
    elif args.members:
        print(render_members(groups, verbose=getattr(args, "members_verbose", False)))
    else:
        print(render_table(groups))
    if task_clients and not args.json:
        print(render_task_clients(task_clients))
    return 0 if all(g.get("error_code", 0) == 0 for g in groups) else 1


def render_task_clients(task_clients: list[dict[str, str]]) -> str:
    """The footer ``describe --admin`` prints when connector task data passes through the bridge."""
    from connect_bridge.bridge.upstream.task_clients import WORKER_SETTING, ClientKind

    settings = sorted({WORKER_SETTING[ClientKind(c["client_kind"])] for c in task_clients})
    seen = ", ".join(f"{c['client_id']} from {c['host']}" for c in task_clients[:5])
    more = f" and {len(task_clients) - 5} more" if len(task_clients) > 5 else ""
    return (
        f"\nconnector task data passes through this bridge: {seen}{more}; to send it straight to the "
        f'brokers set {", ".join(settings)} on those workers (docs/upstream.md "Coordination only")'
    )


def group_placement(ha: dict[str, Any], group_id: str) -> dict[str, Any]:
    """The group's state-topic partition and its owning bridge, from ``GET /admin/ha``."""
    from connect_bridge.state.partitioning import partition_for

    partition = partition_for(group_id, int(ha["partitions"]))
    return {"partition": partition, "owner": ha["owners"].get(str(partition))}


def _endpoint(args: argparse.Namespace) -> AdminEndpoint:
    """``--admin`` of ``adopt``/``release`` with their TLS options (``cli_admin``)."""
    return admin_endpoint(args.admin, args.ca_file, args.cert, args.key, token_file=args.admin_token_file)


def cmd_adopt(args: argparse.Namespace) -> int:
    """POST /admin/groups/GROUP/adopt on the bridge's metrics listener (or GET /admin/groups with
    ``--status``): 0 when adopted, 1 with the reason when the takeover condition does not hold."""
    from connect_bridge.bridge.admin import adopt_path

    if args.status or not args.group:
        method, path = "GET", "/admin/groups"
    else:
        method, path = "POST", adopt_path(args.group)
    try:
        code, body = admin_request(_endpoint(args), method, path, args.timeout)
    except AdminError as exc:
        return fail(str(exc))
    if method == "GET":
        shown = {args.group: body.get(args.group)} if args.group else body
        print(json.dumps(shown, indent=2, sort_keys=True))
        return 0
    if code != 200:
        return fail(body.get("message", f"HTTP {code}"))
    print(body["message"])
    return 0


def cmd_drain(args: argparse.Namespace) -> int:
    """POST /admin/drain: the bridge hands every state partition to the other bridges (they take its
    groups over without waiting for a session timeout), then stops; 0 once it answered drained
    (docs/high-availability.md "Drain and rolling upgrade of the bridges")."""
    from connect_bridge.bridge.admin import DRAIN_PATH

    try:
        code, body = admin_request(_endpoint(args), "POST", DRAIN_PATH, args.timeout)
    except AdminError as exc:
        return fail(str(exc))
    if code != 200:
        return fail(body.get("message", f"HTTP {code}"))
    print(body["message"])
    return 0


def cmd_release(args: argparse.Namespace) -> int:
    """POST /admin/groups/GROUP/release, then (unless ``--no-wait``) wait until the group is
    ``released``: each worker is sent back to the upstream coordinator at its next request, so this
    takes about one heartbeat interval (docs/adoption.md "Hand-back")."""
    import time

    from connect_bridge.bridge.admin import release_path

    try:
        endpoint = _endpoint(args)
        code, body = admin_request(endpoint, "POST", release_path(args.group), args.timeout)
    except AdminError as exc:
        return fail(str(exc))
    if code != 200:
        return fail(body.get("message", f"HTTP {code}"))
    print(body["message"])
    deadline = time.monotonic() + args.timeout
    status: dict[str, Any] = {}
    while not args.no_wait:
        try:
            status = admin_request(endpoint, "GET", "/admin/groups", args.timeout)[1].get(args.group) or {}
        except AdminError as exc:
            return fail(str(exc))
        if status.get("phase") == "released":
            print(f"group {args.group} is released: the upstream coordinator has it")
            return 0
        if time.monotonic() >= deadline:
            return fail(
                f"group {args.group} still {status.get('phase')} after {args.timeout:g}s with "
                f"{status.get('bridge_members')} member(s) left in the bridge's group; "
                "`connect-bridge adopt --status` shows the progress"
            )
        time.sleep(0.5)
    return 0
