"""The deploy files beyond the config: the pinned base image and the hash-locked dependencies the
image installs, its health check against a metrics listener with ``metrics_tls``, systemd readiness
(``Type=notify``, a real unix datagram socket) and the Grafana dashboard (every query against the
metric names the bridge exports). ``tests/test_packaging.py`` checks the rest of deploy/.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import pytest
import yaml
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from certs import TlsMaterial, tls_material
from connect_bridge.bridge import probe
from connect_bridge.bridge.edge import sd_notify
from connect_bridge.bridge.edge.http import start_http
from connect_bridge.bridge.metrics import Metrics
from connect_bridge.bridge.security.tls import ListenerTls, ReloadingServerContext
from dockerfile_reader import Instruction, healthcheck_command, parse_dockerfile, stages
from kafka_processes import free_ports
from test_alert_rules import selectors, shipped_rules

__all__ = ["tls_material"]

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
LOCK = DEPLOY / "requirements.lock"
DASHBOARD = DEPLOY / "grafana" / "connect-bridge.json"
UNIT = DEPLOY / "connect-bridge.service"
EXAMPLE = DEPLOY / "bridge.yaml"
GUIDE = ROOT / "docs" / "operator-guide.md"
LISTENING = "connect-bridge listening on "


@pytest.fixture(scope="module")
def image() -> list[list[Instruction]]:
    return stages(parse_dockerfile((DEPLOY / "Dockerfile").read_text(encoding="utf-8")))


# --- the base image and the locked dependencies ---------------------------------------------------


def test_base_image_is_an_exact_python_release(image: list[list[Instruction]]) -> None:
    """Not the floating ``3.11-slim``: a rebuild gets the same interpreter and Debian suite, and
    matches the Python the lock was compiled for (its header)."""
    bases = {stage[0].args.split()[0] for stage in image}
    assert len(bases) == 1, bases
    (base,) = bases
    pinned = re.fullmatch(r"python:(3\.\d+)\.\d+-slim-(bookworm|trixie)(@sha256:[0-9a-f]{64})?", base)
    assert pinned, f"{base}: pin an exact release (python:3.11.N-slim-SUITE)"
    assert f"pip-compile with Python {pinned.group(1)}" in LOCK.read_text(encoding="utf-8")


def locked() -> dict[str, tuple[str, list[str]]]:
    """Name -> (pinned version, hashes) of every requirement of the lock file."""
    out: dict[str, tuple[str, list[str]]] = {}
    text = LOCK.read_text(encoding="utf-8").replace("\\\n", " ")
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        requirement, *options = re.split(r"\s+--", line)
        hashes = [o.removeprefix("hash=") for o in options if o.startswith("hash=")]
        parsed = Requirement(requirement.strip())
        (spec,) = parsed.specifier
        assert spec.operator == "==", f"{LOCK.name}: {requirement} is not pinned with =="
        out[canonicalize_name(parsed.name)] = (spec.version, hashes)
    return out


def runtime_closure() -> dict[str, list[Requirement]]:
    """The runtime dependencies of pyproject.toml and theirs, by the installed distributions'
    metadata (names only: the installed versions need not be the locked ones), markers evaluated
    for Linux."""
    env = default_environment() | {"sys_platform": "linux", "platform_system": "Linux", "extra": ""}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    todo = [Requirement(r) for r in project["dependencies"]]
    seen: dict[str, list[Requirement]] = {}
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        name = canonicalize_name(req.name)
        seen.setdefault(name, []).append(req)
        if len(seen[name]) > 1:
            continue
        try:
            requires = distribution(name).requires or []
        except PackageNotFoundError:
            continue
        todo += [Requirement(r) for r in requires]
    return seen


def test_lock_pins_exactly_the_runtime_dependencies_with_hashes() -> None:
    lock = locked()
    closure = runtime_closure()
    assert set(lock) == set(closure), (
        f"regenerate {LOCK.name} (deploy/README.md): missing {sorted(set(closure) - set(lock))}, "
        f"extra {sorted(set(lock) - set(closure))}"
    )
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    direct = {canonicalize_name(Requirement(r).name): Requirement(r) for r in project["dependencies"]}
    for name, (version, hashes) in lock.items():
        assert hashes and all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in hashes), name
        if name in direct:  # the versions of indirect ones are the direct ones' business (pip-compile)
            assert direct[name].specifier.contains(version, prereleases=True), f"{name}=={version}"


def test_image_installs_the_lock_with_hashes_and_the_wheel_without_dependencies(
    image: list[list[Instruction]],
) -> None:
    runtime = " ".join(i.args for i in image[-1] if i.keyword == "RUN")
    assert re.search(r"pip install [^&]*--require-hashes -r \S*requirements\.lock", runtime), runtime
    assert re.search(r"pip install [^&]*--no-deps /wheels/\*\.whl", runtime), runtime
    copied = [i.words() for i in image[-1] if i.keyword == "COPY" and "from" not in i.flags]
    assert any(words[0] == "deploy/requirements.lock" for words in copied)


# --- the health check honours metrics_tls ---------------------------------------------------------


def write_config(path: Path, port: int, metrics_tls: dict[str, str] | None) -> Path:
    doc: dict = {"metrics_listen": f"0.0.0.0:{port}", "state_dir": str(path.parent / "state")}
    if metrics_tls is not None:
        doc["metrics_tls"] = metrics_tls
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


@pytest.mark.parametrize("client_auth", [None, "none", "requested"])
def test_health_check_follows_the_configs_metrics_listener(
    tls_material: TlsMaterial, tmp_path: Path, image: list[list[Instruction]], client_auth: str | None
) -> None:
    """The image's HEALTHCHECK command, its config path pointed at a config whose metrics listener
    is plain HTTP or HTTPS (``metrics_tls``): 0 while a listener answers, 1 once it is gone."""
    m = tls_material
    tls = None
    if client_auth is not None:
        tls = {"certfile": str(m.server_cert), "keyfile": str(m.server_key), "client_auth": client_auth}
        tls |= {"cafile": str(m.ca_cert)} if client_auth != "none" else {}
    (port,) = free_ports(1)
    config = write_config(tmp_path / "bridge.yaml", port, tls)
    argv = healthcheck_command(next(i for i in image[-1] if i.keyword == "HEALTHCHECK"))
    assert argv == ["python", "-m", "connect_bridge.bridge.probe", "/etc/connect-bridge/bridge.yaml"]
    command = [sys.executable, *argv[1:3], str(config)]
    context = ReloadingServerContext(ListenerTls(**tls)).context if tls else None

    async def scenario() -> None:
        http = await start_http("127.0.0.1", port, Metrics(), lambda: True, ssl=context)
        try:
            up = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, timeout=30)
            assert up.returncode == 0, up.stderr
        finally:
            http.close()
            await http.wait_closed()
        down = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, timeout=30)
        assert down.returncode == 1 and down.stderr.startswith("unhealthy: "), down.stderr

    asyncio.run(scenario())


def test_probe_url_and_its_refusals(tmp_path: Path) -> None:
    assert probe.check(write_config(tmp_path / "a.yaml", 9, None)).startswith("http://127.0.0.1:9/livez")  # type: ignore[union-attr]
    off = tmp_path / "off.yaml"
    off.write_text("metrics_listen: off\n", encoding="utf-8")
    assert "metrics_listen is off" in str(probe.check(off))
    bad = tmp_path / "bad.yaml"
    bad.write_text("metrics_lisen: 1\n", encoding="utf-8")
    assert probe.main([str(bad)]) == 1


# --- systemd readiness ----------------------------------------------------------------------------


def test_notify_sends_one_datagram_to_a_path_and_an_abstract_socket(tmp_path: Path) -> None:
    path = tmp_path / "notify.sock"
    abstract = f"@connect-bridge-test-{time.monotonic_ns()}"
    for name, address in ((str(path), str(path)), (abstract, b"\0" + abstract[1:].encode())):
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.bind(address)
            assert sd_notify.notify(sd_notify.READY, "STATUS=x", environ={"NOTIFY_SOCKET": name})
            assert sock.recv(4096) == b"READY=1\nSTATUS=x"
    assert not sd_notify.notify(sd_notify.READY, environ={})
    assert not sd_notify.notify(sd_notify.READY, environ={"NOTIFY_SOCKET": str(tmp_path / "gone.sock")})


def test_unit_waits_for_the_bridges_readiness() -> None:
    text = UNIT.read_text(encoding="utf-8")
    assert re.search(r"^Type=notify$", text, re.M) and re.search(r"^NotifyAccess=main$", text, re.M)


@pytest.mark.live
@pytest.mark.heavy
def test_serve_notifies_ready_only_once_it_serves_then_stopping(tmp_path: Path) -> None:
    """``serve`` as systemd runs it (``NOTIFY_SOCKET`` set): READY=1 arrives once, when /readyz
    already answers 200, and STOPPING=1 on SIGTERM."""
    listen, metrics = free_ports(2)
    path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        sock.settimeout(30)
        proc = subprocess.Popen(
            [sys.executable, "-m", "connect_bridge.cli", "serve", "--listen", f"127.0.0.1:{listen}",
             "--metrics-listen", f"127.0.0.1:{metrics}", "--state-dir", str(tmp_path / "state")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**__import__("os").environ, "NOTIFY_SOCKET": str(path)},
        )  # fmt: skip
        try:
            first = sock.recv(4096).decode()
            assert first.startswith("READY=1\n") and f":{listen}" in first, first
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/readyz", timeout=5) as answer:
                assert answer.status == 200
            proc.terminate()
            assert sock.recv(4096) == b"STOPPING=1"
            assert proc.wait(20) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
            assert proc.stdout is not None and proc.stderr is not None
            proc.stdout.close()
            proc.stderr.close()


# --- the Grafana dashboard ------------------------------------------------------------------------


def exported_names() -> set[str]:
    """Every series name the bridge's registry can expose (histogram and counter suffixes)."""
    names = set()
    for family in Metrics().registry.collect():
        kind = family.type
        names.add(family.name)
        if kind == "histogram":
            names |= {f"{family.name}_bucket", f"{family.name}_sum", f"{family.name}_count"}
        if kind == "counter":
            names |= {f"{family.name}_total", f"{family.name}_created"}
    return names


def dashboard_queries() -> list[str]:
    doc = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    queries = [t["expr"] for panel in doc["panels"] for t in panel.get("targets", [])]
    queries += [v["definition"] for v in doc["templating"]["list"] if v["type"] == "query"]
    return queries


def test_dashboard_is_a_loadable_grafana_dashboard() -> None:
    doc = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert doc["uid"] and doc["title"] and doc["schemaVersion"] >= 30
    ids = [panel["id"] for panel in doc["panels"]]
    assert len(ids) == len(set(ids))
    for panel in doc["panels"]:
        assert panel["targets"] and {"h", "w", "x", "y"} <= panel["gridPos"].keys(), panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
    cells = {(p["gridPos"]["x"], p["gridPos"]["y"]) for p in doc["panels"]}
    assert len(cells) == len(doc["panels"]), "two panels at the same place"


def test_dashboard_queries_name_only_exported_metrics_and_every_metric_the_guide_names() -> None:
    exported = exported_names()
    read = set()
    for query in dashboard_queries():
        names = set(re.findall(r"\bconnect_bridge_[a-z0-9_]+", query))
        assert names, query
        assert names <= exported, (query, names - exported)
        read |= names
    guide = GUIDE.read_text(encoding="utf-8")
    table = set(re.findall(r"^\| `(connect_bridge_[a-z_]+)", guide, re.M))
    alerts = {s.name for rule in shipped_rules() for s in selectors(str(rule["expr"]))} - {"up"}
    for name in table | alerts:
        assert any(r == name or r.startswith(name.removesuffix("_total")) for r in read), (
            f"the dashboard shows nothing of {name}, which the guide names"
        )
