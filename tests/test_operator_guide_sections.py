"""The guide's commands that need a setting of their own, run as written (docs/operator-guide.md).

``tests/test_operator_guide.py`` runs the plain ```sh blocks in document order against one bridge.
The blocks whose fence names a section need something that run does not have, so each section's
test here builds it and runs *the guide's own text* in it, with the guide's names replaced by the
test's as an explicit table (every entry must be used, no placeholder may survive):

- ```sh credentials: ``connect-bridge credentials add`` in a temporary directory; the file it
  writes is read back with the bridge's credentials loader and the password checks against it,
  and the guide's terminated-SASL ``bridge.yaml`` names that file and loads;
- ```sh cluster: Kafka's own ``kafka-configs.sh`` and ``kafka-acls.sh`` (the classes the scripts
  run) against the secured broker of ``tests/kafka_secure.py`` as its super user: the bridge's
  SCRAM user they create logs in, the rules they add are read back in the ``kafka-acls.sh --list``
  format, and the guide's dump of a group's rules loads as the bridge's ``acl_file``;
- ```sh adoption: a bridge with the guide's ``adoption`` section in front of the session's Kafka
  broker, and a running classic Connect group of two live workers (``workers/live_legacy.py`` on
  kafka-python's real group client) repointed at the bridge one at a time: ``adopt --status`` while
  relaying, ``adopt`` and ``describe --admin`` once adopted, ``release``, ``adopt --status`` once
  released, and adopting it again.

The ```sh ha blocks (``curl /admin/ha``, ``drain``) run in ``tests/test_ha.py`` on the fleet that
module starts anyway. Every ```yaml settings block of the guide is loaded with the bridge's own
settings loader: a block with ``listen`` is a whole ``bridge.yaml``; any other is what the guide
says to add to the ``bridge.yaml`` of section 3, so it is loaded on top of that file.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kafka.admin import (
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ResourcePatternFilter,
    ResourceType,
)
from kafka.errors import NoError

from connect_bridge.bridge.security.acls import (
    Operation,
    PatternType,
    Permission,
    load_acl_file,
    parse_acl_listing,
)
from connect_bridge.bridge.security.credentials import load_credentials
from connect_bridge.bridge.security.scram import verify_password
from connect_bridge.bridge.settings import BridgeSettings, load_settings
from connect_bridge.state.model import ConfigView
from connect_bridge.workers.live_legacy import LiveLegacyWorker
from doc_commands import ENV, REPO, Block, fenced_blocks, last_json, substitute
from java_tools import CONFIGS, tool_command
from kafka_fixtures import KafkaBroker, start_bridge
from kafka_processes import free_ports
from kafka_secure import SecureKafka
from polling import wait_until

GUIDE = REPO / "docs" / "operator-guide.md"
ACL_COMMAND = "org.apache.kafka.tools.AclCommand"
"""The main class of Kafka 4.3.1's ``bin/kafka-acls.sh``."""
GROUPS_COMMAND = "org.apache.kafka.tools.GroupsCommand"
"""The main class of Kafka 4.3.1's ``bin/kafka-groups.sh`` (KIP-1043: every type of group)."""
PLACEHOLDERS = ("example.internal", "prod.internal", "/etc/", "/var/", "127.0.0.1:9404", "connect-cluster")


def guide() -> list[Block]:
    return fenced_blocks(GUIDE.read_text(encoding="utf-8"))


def section(tag: str, table: list[tuple[str, str]]) -> list[str]:
    """The bodies of the guide's ```sh TAG blocks in document order, with ``table`` applied; every
    entry of the table is used and no guide name is left."""
    used: set[str] = set()
    bodies = [substitute(b.body, table, used) for b in guide() if b.lang == "sh" and b.tag == tag]
    assert bodies, f"the guide has no ```sh {tag} block"
    assert used == {old for old, _ in table}, f"unused substitutions: { ({o for o, _ in table} - used) }"
    for body in bodies:
        leftovers = [p for p in PLACEHOLDERS if p in body]
        assert not leftovers, f"{leftovers} not in the substitution table: {body}"
    return bodies


def run(body: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    """A guide block with ``bash -euo pipefail``, as an operator's shell runs it (exit code kept)."""
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", body],
        cwd=cwd,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )


def section3_settings() -> dict[str, Any]:
    """The ``bridge.yaml`` that section 3, step 1 writes (the heredoc of its command)."""
    (writer,) = [b for b in guide() if b.lang == "sh" and "cat > /etc/connect-bridge/bridge.yaml" in b.body]
    found = re.search(r"<<'EOF'\n(.*?)^EOF$", writer.body, re.S | re.M)
    assert found, writer.body
    return dict(yaml.safe_load(found.group(1)))


# ------------------------------------------------------------------ settings blocks

SETTINGS_CLAIMS: dict[str, Any] = {
    "mode: terminated": lambda s: s.sasl.mode == "terminated" and s.sasl.credentials_file and not s.upstream,
    "upstream_sasl:": lambda s: s.sasl.mode == "passthrough" and s.upstream_sasl.mechanism == "SCRAM-SHA-512",
    "authorization:": lambda s: s.authorization.enabled and s.authorization.from_upstream,
    "adoption:": lambda s: re.fullmatch(s.adoption.groups or "", "connect-cluster") is not None,
    "ha:": lambda s: s.ha.enabled and s.state_topic == "connect-bridge-state" and s.ha.node_id == 1,
    "admin_allow_remote:": lambda s: s.metrics_tls.client_auth == "required" and not s.admin_allow_remote,
    "tls:": lambda s: s.tls.client_auth == "required" and s.upstream_tls.check_hostname,
}
"""What each settings block is there to set -> the check that the loaded settings set it. A block
is known by the first of these texts it contains (the SASL block has ``tls:`` too: order matters)."""


def claim_of(body: str) -> str:
    claims = [key for key in SETTINGS_CLAIMS if key in body]
    assert claims, f"a settings block this test does not know:\n{body}"
    return claims[0]


def test_every_settings_block_loads(tmp_path: Path) -> None:
    base = section3_settings()
    blocks = [b for b in guide() if b.lang == "yaml" and not b.body.startswith("groups:")]  # not alerts
    claimed = []
    for block in blocks:
        doc = yaml.safe_load(block.body)
        whole = doc if "listen" in doc else base | doc  # "add to bridge.yaml": a later key wins
        path = tmp_path / f"bridge-{block.line}.yaml"
        path.write_text(yaml.safe_dump(whole), encoding="utf-8")
        settings = load_settings(path)  # what ``serve --config`` loads; raises with the line at fault
        assert isinstance(settings, BridgeSettings)
        claim = claim_of(block.body)
        assert SETTINGS_CLAIMS[claim](settings), f"guide line {block.line}: {claim} not as the guide says"
        claimed.append(claim)
    assert sorted(claimed) == sorted(SETTINGS_CLAIMS), claimed


# ------------------------------------------------------------------ credentials add


def test_credentials_commands(tmp_path: Path) -> None:
    etc = tmp_path / "etc-connect-bridge"
    (body,) = section("credentials", [("/etc/connect-bridge", str(etc))])
    password = "guide-" + uuid.uuid4().hex[:8]
    done = run(f"export CONNECT_PASSWORD={shlex.quote(password)}\n{body}")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done
    assert password not in done.stdout + done.stderr  # never echoed
    file = etc / "sasl" / "credentials.yaml"
    assert password not in file.read_text(encoding="utf-8")
    store = load_credentials(file)
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        credential = store.lookup(mechanism, "connect")
        assert credential is not None and verify_password(mechanism, credential, password), mechanism
        assert not verify_password(mechanism, credential, password + "x")
    # The guide's terminated-SASL bridge.yaml names this very file and loads with it.
    (terminated,) = [b for b in guide() if b.lang == "yaml" and "mode: terminated" in b.body]
    config = tmp_path / "bridge.yaml"
    config.write_text(terminated.body.replace("/etc/connect-bridge", str(etc)), encoding="utf-8")
    assert load_settings(config).sasl.credentials_file == file


# ------------------------------------------------------------------ kafka-configs.sh, kafka-acls.sh


def test_cluster_commands(secure_kafka: SecureKafka, tmp_path: Path) -> None:
    group = f"connect-acl-guide-{uuid.uuid4().hex[:8]}"
    dumped = tmp_path / "acls.txt"
    body = "\n".join(
        section(
            "cluster",
            [
                ("kafka-1.prod.internal:9093", secure_kafka.sasl_ssl),
                ("connect-cluster", group),
                ("/etc/connect-bridge/acls.txt", str(dumped)),
            ],
        )
    )
    admin_props = secure_kafka.java_client_properties("SASL_SSL", user=secure_kafka.admin_user)
    (tmp_path / "admin.properties").write_text("".join(f"{k}={v}\n" for k, v in admin_props.items()))
    # bin/kafka-acls.sh is `exec kafka-run-class.sh org.apache.kafka.tools.AclCommand "$@"`, and
    # kafka-configs.sh the same with kafka.admin.ConfigCommand.
    password = f"bridge-{uuid.uuid4().hex[:12]}"
    script = (
        f'kafka-acls.sh() {{ {shlex.join(tool_command(ACL_COMMAND))} "$@"; }}\n'
        f'kafka-configs.sh() {{ {shlex.join(tool_command(CONFIGS))} "$@"; }}\n'
        f"export BRIDGE_PASSWORD={shlex.quote(password)}\n"
    )
    admin = secure_kafka.admin()
    try:
        added = run(script + body, cwd=tmp_path)
        assert added.returncode == 0, added
        # The bridge's user the guide created logs in with the password from the environment.
        login = secure_kafka.kafka_python_config("SASL_SSL", mechanism="SCRAM-SHA-512")
        login |= {"sasl_plain_username": "connect-bridge", "sasl_plain_password": password}
        wait_until(lambda: _logs_in(login), 30, 0.5, lambda: "the guide's SCRAM user never logged in")
        listed = run(
            script
            + f"kafka-acls.sh --bootstrap-server {secure_kafka.sasl_ssl} --command-config admin.properties "
            f"--list --group {group}",
            cwd=tmp_path,
        )
        assert listed.returncode == 0, listed
        (rule,) = parse_acl_listing(listed.stdout, "kafka-acls.sh --list")  # the acl_file format
        assert (rule.principal, rule.operation, rule.permission) == (
            "User:connect-worker",
            Operation.READ,
            Permission.ALLOW,
        )
        assert (rule.name, rule.pattern_type) == (group, PatternType.LITERAL)
        # The guide's dump into the bridge's acl_file: the group's rule, loadable as the file.
        assert load_acl_file(dumped) == (rule,), dumped.read_text()
        cluster, error = admin.describe_acls(cluster_filter())
        assert error is NoError, error
        assert [a.principal for a in cluster] == ["User:connect-bridge"], cluster
    finally:
        # The session broker is shared and allows everyone where no ACL exists: a CLUSTER rule
        # left behind would close the cluster to every other principal of later tests.
        admin.delete_acls([cluster_filter(), group_filter(group)])
        admin.close()


def _logs_in(config: dict[str, Any]) -> bool:
    """A kafka-python admin client connects with ``config`` (SCRAM credentials reach every broker
    through the metadata log, so the first attempts may be refused)."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    try:
        KafkaAdminClient(**config, request_timeout_ms=5000).close()
    except KafkaError:
        return False
    return True


def cluster_filter() -> ACLFilter:
    """The guide's first rule: the bridge's principal may DESCRIBE the cluster."""
    pattern = ResourcePatternFilter(ResourceType.CLUSTER, "kafka-cluster", ACLResourcePatternType.LITERAL)
    return ACLFilter("User:connect-bridge", "*", ACLOperation.DESCRIBE, ACLPermissionType.ALLOW, pattern)


def group_filter(group: str) -> ACLFilter:
    """The guide's second rule: the worker's principal may READ its group."""
    pattern = ResourcePatternFilter(ResourceType.GROUP, group, ACLResourcePatternType.LITERAL)
    return ACLFilter("User:connect-worker", "*", ACLOperation.READ, ACLPermissionType.ALLOW, pattern)


# ------------------------------------------------------------------ adoption

SESSION_MS, HEARTBEAT_MS, REBALANCE_MS = 6000, 300, 10_000
"""The workers' timeouts: the broker's minimum session, quick heartbeats so rebalances end fast."""
VIEW = ConfigView.of(1, {"guide-source": 2})


class Cluster:
    """Live classic Connect workers (sessioned) of one group, each on a bootstrap of its own."""

    def __init__(self, group: str) -> None:
        self.group = group
        self.workers: dict[str, LiveLegacyWorker] = {}
        self.fatal: list[tuple[str, dict[str, Any]]] = []
        self.lock = threading.Lock()

    def start(self, name: str, bootstrap: str) -> None:
        def on_event(type: str, **fields: Any) -> None:
            if type == "fatal":
                with self.lock:
                    self.fatal.append((name, fields))

        worker = LiveLegacyWorker(
            bootstrap, self.group, f"http://{name}:8083/", "sessioned", on_event,
            session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS,
            rebalance_timeout_ms=REBALANCE_MS, max_delay_ms=2000, config_provider=lambda: VIEW,
            client_id=name,
        )  # fmt: skip
        worker.start()
        self.workers[name] = worker

    def repoint(self, name: str, bootstrap: str) -> None:
        """Stop the worker (SIGTERM: it leaves the group) and start it on ``bootstrap``."""
        self.workers[name].stop()
        self.start(name, bootstrap)

    def converged(self) -> bool:
        """Every configured item runs on exactly one live worker."""
        assert not self.fatal, self.fatal
        running = [item for w in self.workers.values() if not w.dead for item in w.running]
        return sorted(running) == sorted(VIEW.items())

    def close(self) -> None:
        for worker in self.workers.values():
            worker.stop()


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = Cluster(f"connect-guide-{uuid.uuid4().hex[:8]}")
    try:
        yield c
    finally:
        c.close()


def status(out: str, group: str) -> dict[str, Any]:
    """The group's entry of ``adopt --status`` output."""
    return dict(last_json(out)[group])


@pytest.mark.live  # a bridge process in front of the session's Kafka broker, live workers
def test_adoption_commands(kafka_broker: KafkaBroker, cluster: Cluster, tmp_path: Path) -> None:
    group, (port,) = cluster.group, free_ports(1)
    metrics = f"127.0.0.1:{port}"
    (fragment,) = [b for b in guide() if b.lang == "yaml" and b.body.startswith("adoption:")]
    settings = yaml.safe_load(
        fragment.body.replace("connect-cluster", group).replace("127.0.0.1:9404", metrics)
    )
    for name in ("w0", "w1"):  # the cluster runs on Kafka's coordinator
        cluster.start(name, kafka_broker.bootstrap)
    wait_until(cluster.converged, 60, 0.2, lambda: "the workers never ran the connector on Kafka")
    bridge = start_bridge(
        kafka_broker.bootstrap, tmp_path / "bridge", settings={"adoption": settings["adoption"]},
        metrics_listen=settings["metrics_listen"],
    )  # fmt: skip
    try:
        table = [
            ("127.0.0.1:9404", metrics),
            ("bridge-1.example.internal:9092", bridge.bootstrap),
            ("broker1:9092", kafka_broker.bootstrap),
        ]
        table.append(("connect-cluster", group))
        blocks = section("adoption", table)
        relaying_status, adopt, describe, release, released_status, kafka_view, adopt_again = blocks

        cluster.repoint("w0", bridge.bootstrap)  # step 3: one worker behind the bridge
        wait_until(lambda: cluster.converged() and run(relaying_status).returncode == 0, 60, 0.3)

        def relaying() -> bool:  # "members" fills in once the bridge has seen the leader's JoinGroup
            shown = status(run(relaying_status).stdout, group)
            return (shown["phase"], shown.get("members_behind_bridge")) == ("relaying", 1)

        wait_until(relaying, 60, 0.5, lambda: f"not relaying with 1 member behind: {run(relaying_status)}")

        cluster.repoint("w1", bridge.bootstrap)  # step 5: the last one; mode auto takes it over
        taken = run(adopt)
        assert taken.returncode in (0, 1) and "Traceback" not in taken.stderr, taken
        if taken.returncode == 1:  # the last rebalance still under way: "not yet", then auto
            assert "not" in taken.stderr, taken
        wait_until(lambda: status(run(relaying_status).stdout, group)["phase"] == "adopted", 60, 0.5)
        again = run(adopt)
        assert again.returncode == 0 and "already adopted" in again.stdout, again
        # step 6: Kafka's copy of the group emptied (the adopted members' LeaveGroup upstream)
        wait_until(lambda: status(run(relaying_status).stdout, group)["upstream_state"] == "Empty", 30, 0.5)
        wait_until(cluster.converged, 60, 0.2, lambda: "not converged behind the bridge")
        described = run(describe)
        assert (
            described.returncode == 0 and "adoption: adopted, taken over at generation" in described.stdout
        ), described

        handed = run(release)  # hand-back: waits until the upstream coordinator has the group
        assert handed.returncode == 0 and f"group {group} is released" in handed.stdout, handed
        shown = status(run(released_status).stdout, group)
        assert (shown["phase"], shown["bridge_members"]) == ("released", 0), shown
        # Kafka's kafka-groups.sh (GroupsCommand) lists it as its own classic group of protocol connect.
        tool = f'kafka-groups.sh() {{ {shlex.join(tool_command(GROUPS_COMMAND))} "$@"; }}\n'
        listed = run(tool + kafka_view)
        assert listed.returncode == 0, listed
        assert listed.stdout.split() == [group, "Classic", "connect"], listed.stdout
        wait_until(cluster.converged, 60, 0.2, lambda: "not converged on Kafka's coordinator")

        readopted = run(adopt_again)  # either adopted at once, or relaying until the condition holds
        assert "Traceback" not in readopted.stderr, readopted
        assert (readopted.returncode == 0 and "adopted at generation" in readopted.stdout) or (
            readopted.returncode == 1
            and "is relaying again (it was released) but not adopted yet" in readopted.stderr
        ), readopted
        assert bridge.process.poll() is None
    finally:
        assert bridge.stop() == 0, bridge.log_path.read_text()[-3000:]
