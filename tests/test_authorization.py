"""Group authorization and member ownership through a real bridge (issue 15 item 4).

A real ``BridgeServer`` (``test_server.Running``) with SASL terminated by the bridge (credentials
made by ``connect-bridge credentials add``) and ``authorization`` from an ACL file in
``kafka-acls.sh --list`` format; clients are the bridge's ``KafkaConnection`` logged in as
``alice``, ``bob`` and ``mallory`` (SCRAM-SHA-512), speaking every group API on the wire:

- ``mallory`` has no ACL: every group API is GROUP_AUTHORIZATION_FAILED (30), ListGroups and an
  empty ConnectGroupDescribe show nothing;
- ``bob`` may READ ``connect-*`` but is denied ``connect-secret``: he cannot act on alice's member
  (UNKNOWN_MEMBER_ID, as for an id nobody has; SyncGroup and ConnectGroupInstallAssignment checked
  against members for which alice's own call succeeds) and does not see ``connect-secret`` listed;
- FindCoordinator needs DESCRIBE on the group (Kafka's ``KafkaApis.getCoordinator``): per key
  from v4 on, the whole answer before;
- every decision is counted in /metrics by operation and result, and a denial is logged as one
  structured line, rate-limited per (principal, operation, group).

The broker-backed part reads the rules from a real Kafka 4.3.1 broker's DescribeAcls (ACLs
created with Kafka's admin API on the shared secure broker, as the bridge's own SASL identity)
and refreshes them while the bridge runs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.admin import ACL, ACLOperation, ACLPermissionType, ResourcePattern, ResourceType

from connect_bridge.bridge.app import group_authorizer
from connect_bridge.bridge.metrics import Metrics
from connect_bridge.bridge.security.acls import (
    AclSourceError,
    Operation,
    Permission,
    load_acl_file,
    parse_acl_listing,
)
from connect_bridge.bridge.security.authorization import (
    GroupAuthorizer,
    fetch_upstream_rules,
    refresh_from_upstream,
)
from connect_bridge.bridge.security.sasl_client import upstream_login
from connect_bridge.bridge.security.sasl_settings import SaslSettings, UpstreamSasl
from connect_bridge.bridge.settings import SettingsError, load_settings
from connect_bridge.bridge.startup import StartupError
from connect_bridge.codecs import messages as m
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.state import api as napi
from connect_bridge.state.classic import api as capi
from connect_bridge.state.model import EMPTY, ClientAssignor, Items
from connect_bridge.wire import maps as wm
from connect_bridge.wire.client import KafkaConnection
from kafka_secure import SecureKafka
from polling import wait_until
from test_sasl_terminated import credentials_file
from test_server import HEARTBEAT_V, HOST, JOIN_V, SYNC_V, VIEW, Running, protocols, run, running

OPEN, SECRET = "connect-cluster", "connect-secret"
CLASSIC, ASSIGNED = "connect-classic", "connect-assigned"
USERS = {"alice": "alice-secret", "bob": "bob-secret", "mallory": "mallory-secret"}
DENIED = int(ErrorCode.GROUP_AUTHORIZATION_FAILED)
UNKNOWN = int(ErrorCode.UNKNOWN_MEMBER_ID)
LEAVE_V, DESCRIBE_V, LIST_V = 4, 5, 5

ACLS = """\
# alice and bob may use every connect- group; bob nothing of connect-secret.
Current ACLs for resource `ResourcePattern(resourceType=GROUP, name=connect-, patternType=PREFIXED)`:
 \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)
 \t(principal=User:bob, host=*, operation=READ, permissionType=ALLOW)

Current ACLs for resource `ResourcePattern(resourceType=GROUP, name=connect-secret, patternType=LITERAL)`:
 \t(principal=User:bob, host=127.0.0.1, operation=ALL, permissionType=DENY)
"""


@pytest.fixture(scope="module")
def credentials(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return credentials_file(tmp_path_factory.mktemp("authz") / "credentials.yaml", USERS)


@pytest.fixture
def bridge(credentials: Path, tmp_path: Path) -> Iterator[Running]:
    acl_file = tmp_path / "acls.txt"
    acl_file.write_text(ACLS, encoding="utf-8")
    metrics = Metrics()
    authorizer = GroupAuthorizer(load_acl_file(acl_file), metrics=metrics, source=str(acl_file))
    sasl = SaslSettings(mode="terminated", mechanisms=["SCRAM-SHA-512"], credentials_file=credentials)
    with running(sasl=sasl, authorizer=authorizer, metrics=metrics) as srv:
        yield srv


async def login(port: int, user: str) -> KafkaConnection:
    sasl = UpstreamSasl(mechanism="SCRAM-SHA-512", username=user, password=USERS[user])
    return await KafkaConnection.connect(HOST, port, client_id=user, login=upstream_login(sasl))


class GroupApis:
    """Every group API on one authenticated connection, answered as (error code, detail)."""

    def __init__(self, conn: KafkaConnection) -> None:
        self.conn = conn

    async def beat(
        self, group: str, member_id: str, epoch: int, assignors: tuple[ClientAssignor, ...] | None = None
    ) -> napi.HeartbeatResponse:
        joining = epoch == 0
        req = napi.HeartbeatRequest(
            group,
            member_id,
            epoch,
            rebalance_timeout_ms=60_000 if joining else -1,
            url="http://w:8083" if joining else None,
            config_offset=VIEW.offset if joining else None,
            owned=frozenset() if joining else None,
            client_assignors=assignors,
        )
        return wm.heartbeat_response_from_wire(await self.conn.request(wm.heartbeat_to_wire(req), 0))

    async def prepare(self, group: str, member_id: str, epoch: int) -> int:
        return (await self.prepared(group, member_id, epoch)).error_code

    async def prepared(self, group: str, member_id: str, epoch: int) -> Any:
        """PrepareAssignment's whole answer (its group epoch is what InstallAssignment names)."""
        msg = wm.prepare_to_wire(napi.PrepareAssignmentRequest(group, member_id, epoch))
        return await self.conn.request(msg, 0)

    async def install(
        self, group: str, member_id: str, epoch: int, group_epoch: int | None = None, items: Items = EMPTY
    ) -> int:
        """InstallAssignment giving ``items`` to ``member_id`` alone (in a one-member group with the
        configured work, ``VIEW.items()``, that is complete), at ``group_epoch`` (default ``epoch``)."""
        group_epoch = epoch if group_epoch is None else group_epoch
        req = napi.InstallAssignmentRequest(group, member_id, epoch, group_epoch, members={member_id: items})
        return (await self.conn.request(wm.install_to_wire(req), 0)).error_code

    async def connect_describe(self, *groups: str) -> list[tuple[str, int]]:
        answer = await self.conn.request(wm.describe_to_wire(groups), 0)
        return [(g.group_id, g.error_code) for g in wm.describe_response_from_wire(answer)]

    async def join(self, group: str, member_id: str = "") -> int:
        req = capi.JoinGroupRequest(group, member_id, "connect", protocols("http://w:8083"), 10_000, 30_000)
        msg = await self.conn.request(wm.join_to_wire(req, JOIN_V), JOIN_V)
        return wm.join_response_from_wire(msg).error_code

    async def classic_member(self, group: str) -> tuple[str, int]:
        """Join ``group`` as a classic (sessioned) worker, as Kafka 2.2+ clients do (a first JoinGroup
        gets MEMBER_ID_REQUIRED and the id to join with): its member id and generation."""
        member_id = ""
        for _ in range(2):
            req = capi.JoinGroupRequest(
                group, member_id, "connect", protocols("http://w:8083"), 10_000, 30_000
            )
            answer = await self.conn.request(wm.join_to_wire(req, JOIN_V), JOIN_V)
            joined = wm.join_response_from_wire(answer)
            member_id = joined.member_id
        assert joined.error_code == 0, joined
        return joined.member_id, joined.generation_id

    async def sync(self, group: str, member_id: str, generation: int = 1) -> int:
        req = capi.SyncGroupRequest(group, member_id, generation, None, "connect", "sessioned", ())
        return wm.sync_response_from_wire(
            await self.conn.request(wm.sync_to_wire(req, SYNC_V), SYNC_V)
        ).error_code

    async def heartbeat(self, group: str, member_id: str) -> int:
        req = capi.HeartbeatRequest(group, member_id, 1)
        msg = await self.conn.request(wm.classic_heartbeat_to_wire(req, HEARTBEAT_V), HEARTBEAT_V)
        return wm.classic_heartbeat_response_from_wire(msg).error_code

    async def leave(self, group: str, member_id: str) -> tuple[int, list[int]]:
        req = capi.LeaveGroupRequest(group, (capi.LeavingMember(member_id),))
        msg = await self.conn.request(wm.leave_to_wire(req, LEAVE_V), LEAVE_V)
        return msg.error_code, [member.error_code for member in msg.members]

    async def describe_groups(self, *groups: str) -> list[tuple[str, int]]:
        msg = m.DescribeGroupsRequest(groups=list(groups), include_authorized_operations=False)
        answer = await self.conn.request(msg, DESCRIBE_V)
        return [(g.group_id, g.error_code) for g in wm.describe_groups_response_from_wire(answer)]

    async def list_groups(self) -> list[str]:
        answer = await self.conn.request(wm.list_groups_to_wire(LIST_V), LIST_V)
        assert answer.error_code == 0
        return sorted(row[0] for row in wm.list_groups_response_from_wire(answer))

    async def find_coordinators(self, *groups: str) -> list[tuple[str, int, int]]:
        """FindCoordinator v4 (a batch): (key, error code, node id) per group."""
        msg = m.FindCoordinatorRequest(key_type=0, coordinator_keys=list(groups))
        answer = await self.conn.request(msg, 4)
        return [(c.key, c.error_code, c.node_id) for c in answer.coordinators]

    async def find_coordinator_v3(self, group: str) -> tuple[int, str | None, int]:
        """FindCoordinator v3 (one key, a top-level error): (error code, message, node id)."""
        answer = await self.conn.request(m.FindCoordinatorRequest(key=group, key_type=0), 3)
        return answer.error_code, answer.error_message, answer.node_id


def metric(metrics: Metrics, operation: str, result: str) -> float:
    value = metrics.registry.get_sample_value(
        "connect_bridge_authorization_decisions_total", {"operation": operation, "result": result}
    )
    return value or 0.0


def denial_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    out = []
    for record in caplog.records:
        if record.name == "connect_bridge.authorization" and "authorization_denied" in record.getMessage():
            out.append(json.loads(record.getMessage()))
    return out


def test_group_apis_are_authorized_and_members_belong_to_their_principal(
    bridge: Running, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="connect_bridge.authorization")

    async def scenario() -> None:
        alice_conn, bob_conn, mallory_conn = [
            await login(bridge.port, u) for u in ("alice", "bob", "mallory")
        ]
        alice, bob, mallory = GroupApis(alice_conn), GroupApis(bob_conn), GroupApis(mallory_conn)
        joined = await alice.beat(OPEN, "", 0)
        assert joined.error_code == 0, joined
        member, epoch = joined.member_id, joined.member_epoch
        assert (await alice.beat(SECRET, "", 0)).error_code == 0

        # mallory: no ACL, refused on every group API before anything is looked up.
        assert (await mallory.beat(OPEN, "", 0)).error_code == DENIED
        for _ in range(5):  # a refused worker retries: one log line, every denial counted
            assert (await mallory.beat(OPEN, member, epoch)).error_code == DENIED
        assert await mallory.prepare(OPEN, member, epoch) == DENIED
        assert await mallory.install(OPEN, member, epoch) == DENIED
        assert await mallory.connect_describe(OPEN) == [(OPEN, DENIED)]
        assert await mallory.connect_describe() == []  # every group it may describe: none
        assert await mallory.join(OPEN) == DENIED
        assert await mallory.sync(OPEN, member) == DENIED
        assert await mallory.heartbeat(OPEN, member) == DENIED
        assert (await mallory.leave(OPEN, member))[0] == DENIED
        assert await mallory.describe_groups(OPEN, SECRET) == [(OPEN, DENIED), (SECRET, DENIED)]
        assert await mallory.list_groups() == []

        # bob may use the group, not alice's member: answered as an unknown member, at any epoch.
        for asked in (epoch, 0, -1):
            assert (await bob.beat(OPEN, member, asked)).error_code == UNKNOWN
        assert await bob.prepare(OPEN, member, epoch) == UNKNOWN
        assert await bob.join(OPEN, member) == UNKNOWN
        assert await bob.heartbeat(OPEN, member) == UNKNOWN
        assert await bob.leave(OPEN, member) == (0, [UNKNOWN])
        assert await bob.list_groups() == [OPEN]  # connect-secret is hidden from bob
        assert await bob.describe_groups(OPEN, SECRET) == [(OPEN, 0), (SECRET, DENIED)]
        assert await bob.connect_describe(OPEN, SECRET) == [(OPEN, 0), (SECRET, DENIED)]

        # SyncGroup and ConnectGroupInstallAssignment naming alice's members: refused to bob, hers.
        classic, generation = await alice.classic_member(CLASSIC)
        assert await bob.sync(CLASSIC, classic, generation) == UNKNOWN
        assert await alice.sync(CLASSIC, classic, generation) == 0
        leader = await alice.beat(ASSIGNED, "", 0, (ClientAssignor("incremental-cooperative", 1, 2, 0, 2),))
        assert leader.error_code == ErrorCode.COMPUTE_ASSIGNMENT, leader  # alice's worker assigns
        prepared = await alice.prepared(ASSIGNED, leader.member_id, leader.member_epoch)
        assert prepared.error_code == 0, prepared
        target = (ASSIGNED, leader.member_id, leader.member_epoch, prepared.group_epoch, VIEW.items())
        assert await bob.install(*target) == UNKNOWN
        assert await alice.install(*target) == 0

        # alice's member is untouched and hers.
        assert (await alice.beat(OPEN, member, epoch)).error_code == 0
        assert await alice.list_groups() == [ASSIGNED, CLASSIC, OPEN, SECRET]
        for conn in (alice_conn, bob_conn, mallory_conn):
            await conn.close()

    run(scenario())
    metrics = bridge.metrics
    assert metric(metrics, "READ", "denied") == 6 + 6  # mallory's twelve READs
    assert metric(metrics, "DESCRIBE", "denied") >= 5
    assert metric(metrics, "READ", "allowed") >= 8
    mallory_open = [line for line in denial_lines(caplog) if line["principal"] == "User:mallory"]
    reads = [line for line in mallory_open if line["operation"] == "READ" and line["group"] == OPEN]
    assert len(reads) == 1 and reads[0]["suppressed"] == 0
    assert "no ACL allows it" in reads[0]["reason"] and reads[0]["host"] == HOST


def test_find_coordinator_needs_describe_on_the_group(
    bridge: Running, caplog: pytest.LogCaptureFixture
) -> None:
    """Kafka's ``KafkaApis.getCoordinator``: a group key without DESCRIBE is GROUP_AUTHORIZATION_FAILED
    with no coordinator (node -1): per key from v4 on, the whole answer before it."""
    caplog.set_level(logging.INFO, logger="connect_bridge.authorization")

    async def scenario() -> None:
        alice, bob, mallory = [GroupApis(await login(bridge.port, u)) for u in ("alice", "bob", "mallory")]
        assert await alice.find_coordinators(OPEN, SECRET) == [(OPEN, 0, 0), (SECRET, 0, 0)]
        assert await bob.find_coordinators(OPEN, SECRET) == [(OPEN, 0, 0), (SECRET, DENIED, -1)]
        assert await mallory.find_coordinators(OPEN) == [(OPEN, DENIED, -1)]
        assert await bob.find_coordinator_v3(OPEN) == (0, None, 0)
        assert await bob.find_coordinator_v3(SECRET) == (DENIED, "Group authorization failed.", -1)
        assert await mallory.find_coordinator_v3(OPEN) == (DENIED, "Group authorization failed.", -1)
        for apis in (alice, bob, mallory):
            await apis.conn.close()

    run(scenario())
    assert metric(bridge.metrics, "DESCRIBE", "denied") == 4
    assert metric(bridge.metrics, "DESCRIBE", "allowed") == 4
    denied = {(line["principal"], line["group"]) for line in denial_lines(caplog)}
    assert denied == {("User:bob", SECRET), ("User:mallory", OPEN)}  # rate-limited: one line each


# ------------------------------------------------------------------ rules from the upstream cluster


def test_rules_come_from_the_upstream_clusters_describe_acls(secure_kafka: SecureKafka) -> None:
    """ACLs created on a real Kafka broker with its admin API reach the bridge's decisions through
    DescribeAcls as the bridge's own SASL identity, and a refresh picks up a change."""
    group = f"connect-acl-{uuid.uuid4().hex[:8]}"
    admin = secure_kafka.admin()
    read = ACL(
        "User:alice",
        "*",
        ACLOperation.READ,
        ACLPermissionType.ALLOW,
        ResourcePattern(ResourceType.GROUP, group),
    )
    try:
        created = admin.create_acls([read])
        assert not created["failed"], created
        own = secure_kafka.kafka_python_config(
            "SASL_PLAINTEXT", user=secure_kafka.admin_user, mechanism="SCRAM-SHA-512"
        )
        bootstrap = own.pop("bootstrap_servers")

        def fetch():  # the bridge's own identity: TLS-less SASL, SCRAM-SHA-512, a super user
            return fetch_upstream_rules(bootstrap, own)

        wait_until(lambda: any(rule.name == group for rule in fetch()), 30)
        authorizer = GroupAuthorizer(())
        assert not authorizer.allowed("User:alice", HOST, Operation.READ, group)  # fail closed

        async def refreshing() -> None:
            task = asyncio.create_task(refresh_from_upstream(authorizer, fetch, refresh_ms=200))
            try:
                await asyncio.to_thread(
                    wait_until, lambda: authorizer.allowed("User:alice", HOST, Operation.READ, group), 30
                )
                assert not authorizer.allowed("User:bob", HOST, Operation.READ, group)
                deny = ACL(
                    "User:alice",
                    "*",
                    ACLOperation.READ,
                    ACLPermissionType.DENY,
                    ResourcePattern(ResourceType.GROUP, group),
                )
                assert not admin.create_acls([deny])["failed"]
                await asyncio.to_thread(
                    wait_until, lambda: not authorizer.allowed("User:alice", HOST, Operation.READ, group), 30
                )
                assert any(r.permission is Permission.DENY and r.name == group for r in authorizer.rules)
            finally:
                task.cancel()

        run(refreshing(), timeout=90)
    finally:
        admin.close()


# ------------------------------------------------------------------ settings and sources, no process


def write_settings(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bridge.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ("authorization: {enabled: true}", "exactly one of acl_file and from_upstream"),
        ("authorization: {enabled: true, acl_file: a.txt, from_upstream: true}", "exactly one of"),
        ("authorization: {enabled: true, from_upstream: true}", "from_upstream needs upstream"),
        ("authorization: {super_users: [admin]}", "is not a principal such as User:admin"),
        ("authorization: {refresh_ms: 0}", "refresh_ms"),
        ("authorization: {enable: true}", "enable"),
    ],
)
def test_settings_refuse_what_cannot_work(tmp_path: Path, yaml_text: str, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        load_settings(write_settings(tmp_path, yaml_text))


def test_an_unusable_acl_file_stops_the_start_with_one_line(tmp_path: Path) -> None:
    acl_file = tmp_path / "acls.txt"
    acl_file.write_text(
        ACLS + "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, "
        "patternType=LITERAL)`:\n",
        encoding="utf-8",
    )
    settings = load_settings(
        write_settings(tmp_path, f"authorization: {{enabled: true, acl_file: {acl_file}}}")
    )
    with pytest.raises(StartupError) as refused:
        group_authorizer(settings, Metrics())
    assert str(acl_file) in str(refused.value) and "\n" not in str(refused.value)
    missing = load_settings(
        None, {"authorization.enabled": True, "authorization.acl_file": str(tmp_path / "no")}
    )
    with pytest.raises(StartupError, match="no such ACL file"):
        group_authorizer(missing, Metrics())
    assert group_authorizer(load_settings(None, {}), Metrics()) is None  # off by default


def test_a_failed_refresh_keeps_the_rules_read_last(caplog: pytest.LogCaptureFixture) -> None:
    """The upstream source failing (a broker outage) must not lock every worker out: the last rules
    stay, and the failure is logged once per streak, not once per attempt."""
    caplog.set_level(logging.INFO, logger="connect_bridge.authorization")
    rules = parse_acl_listing(ACLS, "acls.txt")
    answers: list[Any] = [rules, AclSourceError("broker down"), AclSourceError("broker down"), ()]
    fetched = asyncio.Event()

    def fetch() -> tuple[Any, ...]:
        answer = answers.pop(0) if answers else ()
        if not answers:
            fetched.set()
        if isinstance(answer, Exception):
            raise answer
        return answer

    authorizer = GroupAuthorizer(())

    async def refreshing() -> list[bool]:
        seen = []
        task = asyncio.create_task(refresh_from_upstream(authorizer, fetch, refresh_ms=20))
        try:
            for _ in range(3):
                await asyncio.sleep(0.02)
                seen.append(authorizer.allowed("User:alice", HOST, Operation.READ, OPEN))
            await asyncio.wait_for(fetched.wait(), 5)
            await asyncio.sleep(0.05)
            seen.append(authorizer.allowed("User:alice", HOST, Operation.READ, OPEN))
        finally:
            task.cancel()
        return seen

    seen = run(refreshing())
    assert seen[:3] == [True, True, True] and seen[-1] is False  # kept through the outage, then emptied
    failures = [r for r in caplog.records if "cannot read the group ACLs" in r.getMessage()]
    assert len(failures) == 1 and "keeping 3 rules" in failures[0].getMessage()
