"""Differential test: the bridge's classic group against Apache Kafka 4.3.1's own classic coordinator.

The same generated sequences of JoinGroup / SyncGroup / Heartbeat / LeaveGroup / DescribeGroups
requests (protocol type ``connect``, Connect's embedded protocol metadata, static and dynamic
members, wrong generations, unknown and foreign member ids, MEMBER_ID_REQUIRED, inconsistent
protocols, rebalance and session timeouts that expire inside the test) go to the real broker (the
session's ``kafka_broker``, through FindCoordinator) and to an in-process ``BridgeServer`` (embedded
mode, migration policy ``disabled`` so the group stays a classic group, initial rebalance delay 0 as
the broker fixture's ``group.initial.rebalance.delay.ms``). Every answer is compared field by field
after normalisation (docs/classic-group.md, "Differences from Kafka's classic coordinator (measured)"):

* member ids become aliases ``<prefix>#n`` (prefix = client id or instance id, n = order of
  appearance per prefix), so the leader and member lists compare through aliases;
* throttle times and error messages are dropped; member lists are sorted by alias (Kafka lists
  members in ``HashMap`` order of their random ids, deviation 6).

A difference is either listed in :data:`KNOWN_DIFFERENCES` (documented, expected explicitly: the
comparison of that sequence stops there, since the two groups have diverged) or fails the test.

How a sequence runs: steps go to both sides at once (lockstep). Each request has its own connection
(Kafka reads nothing more from a connection while a JoinGroup or SyncGroup is parked on it). A
JoinGroup/SyncGroup with no answer after :data:`PARK_WINDOW_S` counts as parked; before the next
step the answered requests of the two sides must agree (a lagging side gets :data:`CATCH_UP_S`).
Sequences of one batch run concurrently (separate groups). Timers: in the fast profile nothing can
expire (session 30 s, rebalance 60 s); the timer profiles use short rebalance timeouts or the
broker's minimum session timeout (6 s) and ``wait`` steps long enough for every cascade of timers
armed before them to settle, with only a few quick steps between waits.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Coroutine
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from connect_bridge.bridge.server import BridgeServer, ServerOptions
from connect_bridge.bridge.stores.store import MemoryRecordStore
from connect_bridge.codecs import messages as m
from connect_bridge.codecs.connect_protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.state.classic import api as capi
from connect_bridge.state.config import CoordinatorConfig, MigrationPolicy
from connect_bridge.wire import maps as wm
from connect_bridge.wire.client import ClientError, KafkaConnection

pytestmark = pytest.mark.heavy

HOST = "127.0.0.1"
PARK_WINDOW_S = 0.2
"""A JoinGroup/SyncGroup unanswered this long is parked (answers come in ~2 ms on loopback)."""
CATCH_UP_S = 4.0
"""How long one side may lag the other before the difference counts."""
SETTLE_S = 0.03
BOGUS_ID = "bogus-member-00000000-0000-0000-0000-000000000000"
GHOST_INSTANCE = "ghost-instance"
MEMBER_ID_REQUIRED = int(ErrorCode.MEMBER_ID_REQUIRED)
REBALANCE_IN_PROGRESS = int(ErrorCode.REBALANCE_IN_PROGRESS)
ILLEGAL_GENERATION = int(ErrorCode.ILLEGAL_GENERATION)
COORDINATOR_NOT_AVAILABLE = int(ErrorCode.COORDINATOR_NOT_AVAILABLE)
COORDINATOR_LOAD_IN_PROGRESS = int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
BRIDGE_CONFIG = CoordinatorConfig(
    classic_initial_rebalance_delay_ms=0,
    migration_policy=MigrationPolicy.DISABLED,
    classic_cooperative_switch_rebalance_ms=None,
)
"""As the broker fixture: group.initial.rebalance.delay.ms=0, group.min.session.timeout.ms=6000; and
without the bridge's extra rebalance after leaving eager (a deliberate difference, docs/classic-group.md)."""

# API key -> (name, the newest version a Java Connect 4.3.1 worker / admin client sends).
JAVA_MAX = {
    int(m.ApiKey.JOIN_GROUP): 9,
    int(m.ApiKey.SYNC_GROUP): 5,
    int(m.ApiKey.HEARTBEAT): 4,
    int(m.ApiKey.LEAVE_GROUP): 5,
    int(m.ApiKey.DESCRIBE_GROUPS): 6,
    int(m.ApiKey.FIND_COORDINATOR): 6,
}

COLLECT = os.environ.get("CDIFF_COLLECT", "")
"""Exploration aid: a file that collects every unknown difference instead of failing at the first."""
STATS: Counter[str] = Counter()
UNIQUE: set[str] = set()
"""Sequences run, steps, and how often each known difference was met (printed at the end)."""


# ------------------------------------------------------------------------------------------- sides


class BridgeThread:
    """An embedded ``BridgeServer`` serving from a background thread's event loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="bridge-diff", daemon=True)
        self.thread.start()
        self.server: BridgeServer = self._call(self._start())
        deadline = time.monotonic() + 10
        while not self._call(self._loaded()):
            assert time.monotonic() < deadline, "bridge did not load"
            time.sleep(0.01)

    async def _start(self) -> BridgeServer:
        server = BridgeServer(
            ServerOptions(host=HOST, port=0, coordinator=BRIDGE_CONFIG), MemoryRecordStore()
        )
        await server.start()
        return server

    async def _loaded(self) -> bool:
        return bool(self.server.loaded)

    def _call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    @property
    def bootstrap(self) -> tuple[str, int]:
        return HOST, self.server.port

    def stop(self) -> None:
        try:
            self._call(self.server.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)
            self.loop.close()


@dataclass(frozen=True)
class Closed:
    """The coordinator closed the connection instead of answering."""

    why: str


class Endpoint:
    """One coordinator: a fresh or idle connection per request, so a parked request never blocks
    the next one (a Kafka broker reads nothing more from a connection until it answered)."""

    def __init__(self, name: str, host: str, port: int) -> None:
        self.name = name
        self.host, self.port = host, port
        self.idle: list[KafkaConnection] = []
        self.all: list[KafkaConnection] = []

    async def request(self, message: Any, version: int, client_id: str) -> Any:
        if self.idle:
            conn = self.idle.pop()
        else:
            conn = await KafkaConnection.connect(self.host, self.port, client_id)
            self.all.append(conn)
        conn.client_id = client_id
        try:
            response = await conn.request(message, version, timeout=None)
        except ClientError as exc:  # the coordinator closed the connection: an answer too
            return Closed(str(exc))
        self.idle.append(conn)
        return response

    async def close(self) -> None:
        for conn in self.all:
            await conn.close()
        self.all.clear()
        self.idle.clear()


async def api_versions(host: str, port: int) -> dict[int, int]:
    conn = await KafkaConnection.connect(host, port, "cdiff-versions")
    try:
        msg = m.ApiVersionsRequest(client_software_name="cdiff", client_software_version="1")
        resp = await conn.request(msg, 3)
        return {k.api_key: k.max_version for k in resp.api_keys}
    finally:
        await conn.close()


async def find_coordinator(host: str, port: int, group: str, version: int) -> tuple[str, int]:
    """FindCoordinator (v4+ batched keys), retried while the coordinator is loading."""
    conn = await KafkaConnection.connect(host, port, "cdiff-find")
    try:
        deadline = time.monotonic() + 30
        while True:
            resp = await conn.request(m.FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), version)
            [c] = resp.coordinators
            if c.error_code == 0:
                return c.host, c.port
            assert c.error_code in (COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS), c
            assert time.monotonic() < deadline, f"no coordinator for {group}: {c}"
            await asyncio.sleep(0.2)
    finally:
        await conn.close()


# ---------------------------------------------------------------------------------------- sequences

PROTOCOL_MENU: tuple[tuple[str, ...], ...] = (
    ("sessioned", "compatible", "default"),  # connect.protocol=sessioned
    ("compatible", "default"),  # compatible
    ("default",),  # eager
    ("range",),  # no protocol in common with a Connect worker
    (),  # no protocol at all
)


@dataclass(frozen=True)
class Member:
    """A worker process slot of a sequence: client id, static instance id, protocols, timeouts."""

    index: int
    static: bool
    protocols: int
    """PROTOCOL_MENU index it usually joins with."""
    session_ms: int
    rebalance_ms: int

    @property
    def client_id(self) -> str:
        return f"w{self.index}"

    @property
    def instance_id(self) -> str | None:
        return f"inst{self.index}" if self.static else None


@dataclass(frozen=True)
class Step:
    """One request (or a wait). ``client``: behave like a Java client afterwards (rejoin with the id
    of MEMBER_ID_REQUIRED, SyncGroup after a successful JoinGroup, rejoin after
    REBALANCE_IN_PROGRESS), as follow-up requests of the same sequence."""

    kind: str  # join, sync, heartbeat, leave, describe, wait
    member: int = 0
    client: bool = False
    mid: str = "own"  # own, empty, bogus, other, stale
    gen: str = "own"  # own, stale, future, none
    protocols: int = -1  # PROTOCOL_MENU index; -1 = the member's own
    bump: int = 0  # config offset in the metadata (a change of metadata)
    ptype: str = "connect"
    instance: str = "own"  # own, other, none
    assign: str = "all"  # all, partial, none, extra
    sync_names: str = "match"  # match, none, wrong
    leavers: tuple[tuple[int, str], ...] = ()  # (member, by: id, instance, bogus)
    wait_ms: int = 0

    def short(self) -> str:
        fields = [
            f"{k}={v!r}"
            for k, v in vars(self).items()
            if k not in ("kind", "member") and v != STEP_DEFAULTS[k]
        ]
        return f"{self.kind} m{self.member} {' '.join(fields)}".strip()


STEP_DEFAULTS = {k: v for k, v in vars(Step("x")).items()}


@dataclass(frozen=True)
class Sequence:
    profile: str
    members: tuple[Member, ...]
    steps: tuple[Step, ...]

    def describe(self) -> str:
        lines = [f"profile {self.profile}; members:"]
        lines += [f"  {x}" for x in self.members]
        lines += [f"  {i:2d}: {s.short()}" for i, s in enumerate(self.steps)]
        return "\n".join(lines)


PROFILES = {
    # name: (session ms, rebalance ms, wait ms, max quick steps between waits)
    "fast": (30_000, 60_000, 0, 0),
    "rebalance": (30_000, 1_500, 7_000, 3),
    "session": (6_000, 2_000, 15_000, 3),
}
MAX_REQUESTS = 60
"""Requests per sequence, follow-ups included."""


@st.composite
def steps_for(draw: st.DrawFn, n_members: int) -> Step:
    member = draw(st.integers(0, n_members - 1))
    kind = draw(
        st.sampled_from(["join"] * 7 + ["heartbeat"] * 5 + ["sync"] * 2 + ["leave", "describe", "restart"])
    )
    if kind == "restart":  # a new process: forgets its member id, joins with "" (static: replacement)
        return Step("join", member, client=True, mid="empty", bump=draw(st.sampled_from([0, 1])))
    odd = draw(st.integers(0, 7)) == 0  # about one step in eight bends one field
    client = draw(st.integers(0, 4)) > 0
    if kind == "join":
        return Step(
            "join",
            member,
            client=client,
            mid=draw(st.sampled_from(["empty", "bogus", "other", "stale"])) if odd else "own",
            protocols=draw(st.sampled_from([-1] * 16 + [0, 1, 2, 3, 4])),
            bump=draw(st.sampled_from([0] * 7 + [1])),
            # Not "consumer": Kafka parses such metadata as a consumer subscription (and a group that
            # a static "consumer" join with Connect metadata creates never completes its first join).
            ptype="other" if draw(st.integers(0, 29)) == 0 else "connect",
            instance=draw(st.sampled_from(["other", "none"])) if draw(st.integers(0, 29)) == 0 else "own",
            assign=draw(st.sampled_from(["all"] * 8 + ["partial", "none", "extra"])),
        )
    if kind == "sync":
        return Step(
            "sync",
            member,
            client=client,
            mid=draw(st.sampled_from(["bogus", "other", "empty"])) if odd else "own",
            gen=draw(st.sampled_from(["stale", "future"])) if draw(st.integers(0, 5)) == 0 else "own",
            assign=draw(st.sampled_from(["all"] * 6 + ["partial", "none", "extra"])),
            sync_names=draw(st.sampled_from(["none", "wrong"])) if draw(st.integers(0, 9)) == 0 else "match",
        )
    if kind == "heartbeat":
        return Step(
            "heartbeat",
            member,
            client=client,
            mid=draw(st.sampled_from(["bogus", "other", "empty", "stale"])) if odd else "own",
            gen=draw(st.sampled_from(["stale", "future", "none"])) if draw(st.integers(0, 9)) == 0 else "own",
            instance=draw(st.sampled_from(["other", "none"])) if draw(st.integers(0, 29)) == 0 else "own",
        )
    if kind == "leave":
        who = draw(st.lists(st.integers(0, n_members - 1), min_size=1, max_size=2, unique=True))
        return Step(
            "leave",
            member,
            leavers=tuple((w, draw(st.sampled_from(["id"] * 6 + ["instance", "bogus"]))) for w in who),
        )
    return Step("describe", member)


@st.composite
def sequences(draw: st.DrawFn, profile: str) -> Sequence:
    session_ms, rebalance_ms, wait_ms, quick = PROFILES[profile]
    n_members = draw(st.sampled_from([1, 2, 2, 3, 3]))
    members = tuple(
        Member(
            i,
            draw(st.integers(0, 3)) == 0,
            draw(st.sampled_from([0, 0, 0, 1, 2])),
            session_ms,
            rebalance_ms,
        )
        for i in range(n_members)
    )
    steps: list[Step] = []
    if profile == "fast":
        steps = draw(st.lists(steps_for(n_members), min_size=4, max_size=24))
    else:
        for _ in range(draw(st.integers(1, 2))):
            steps += draw(st.lists(steps_for(n_members), min_size=1, max_size=quick))
            steps.append(Step("wait", wait_ms=wait_ms))
        steps += draw(st.lists(steps_for(n_members), min_size=0, max_size=quick))
    return Sequence(profile, members, tuple([*steps, Step("describe")]))


@dataclass
class MemberState:
    member_id: str = ""
    old_ids: list[str] = field(default_factory=list)
    generation: int = -1
    protocol_name: str | None = None
    leader: bool = False
    peers: tuple[str, ...] = ()
    joined_protocols: tuple[tuple[str, bytes], ...] = ()
    """The protocols of the member's last JoinGroup answered with a generation."""
    assignment: bytes = b""
    """What the member's last successful SyncGroup gave it."""
    told: bool = False
    """A Heartbeat or SyncGroup answer told it to rejoin since that SyncGroup."""


class SideRun:
    """One sequence on one coordinator: builds the concrete requests from this side's member ids."""

    def __init__(self, endpoint: Endpoint, group: str, seq: Sequence, versions: dict[int, int]) -> None:
        self.endpoint = endpoint
        self.group = group
        self.seq = seq
        self.v = versions
        self.members = [MemberState() for _ in seq.members]
        self.tasks: dict[int, asyncio.Task[Any]] = {}
        self.kinds: dict[int, tuple[str, int]] = {}
        self.sent_mid: dict[int, str] = {}
        self.sent_protocols: dict[int, tuple[tuple[str, bytes], ...]] = {}
        self.seen: set[int] = set()
        self.aliases: dict[str, str] = {}
        self.prefix_count: Counter[str] = Counter()

    # --- requests

    def _mid(self, step: Step, member: int) -> str:
        state = self.members[member]
        if step.mid == "own":
            return state.member_id
        if step.mid == "empty":
            return ""
        if step.mid == "bogus":
            return BOGUS_ID
        if step.mid == "stale":
            return state.old_ids[-1] if state.old_ids else BOGUS_ID
        others = [s.member_id for i, s in enumerate(self.members) if i != member and s.member_id]
        return others[0] if others else BOGUS_ID

    def _instance(self, step: Step, member: int) -> str | None:
        spec = self.seq.members[member]
        if step.instance == "none":
            return None
        if step.instance == "other":
            others = [x.instance_id for x in self.seq.members if x.index != member and x.static]
            return others[0] if others else GHOST_INSTANCE
        return spec.instance_id

    def _gen(self, step: Step, member: int) -> int:
        g = self.members[member].generation
        return {"own": g, "stale": g - 1, "future": g + 1, "none": -1}[step.gen]

    def _protocols(self, step: Step, member: int) -> tuple[tuple[str, bytes], ...]:
        url = f"http://worker-{member}:8083"
        offset = 10 + step.bump
        out = []
        menu = self.seq.members[member].protocols if step.protocols < 0 else step.protocols
        for name in PROTOCOL_MENU[menu]:
            version = {"default": 0, "compatible": 1, "sessioned": 2}.get(name)
            if version is None:
                out.append((name, f"opaque-{member}".encode()))
            elif version == 0:
                out.append((name, encode_subscription(Subscription(url, offset), 0)))
            else:
                allocation = Assignment.build(0, "", "", offset, ())
                out.append((name, encode_subscription(Subscription(url, offset, allocation), version)))
        return tuple(out)

    def _assignments(self, step: Step, member: int) -> tuple[tuple[str, bytes], ...]:
        state = self.members[member]
        if not state.leader or step.assign == "none":
            return ()
        # Same bytes on both sides: tasks dealt by alias order, never a member id inside.
        peers = sorted(state.peers, key=lambda mid: self.aliases.get(mid, mid))
        if step.assign == "partial":
            peers = peers[:1]
        out = [
            (
                mid,
                encode_assignment(
                    Assignment.build(0, f"leader-{member}", "http://leader:8083", 10, [("conn", i)]),
                    1,
                ),
            )
            for i, mid in enumerate(peers)
        ]
        if step.assign == "extra":
            out.append((BOGUS_ID, b"\x00\x01"))
        return tuple(out)

    def build(self, step: Step) -> tuple[Any, int]:
        """The wire request of ``step`` and its version."""
        i = step.member
        spec = self.seq.members[i]
        if step.kind == "join":
            req = capi.JoinGroupRequest(
                self.group,
                self._mid(step, i),
                step.ptype,
                self._protocols(step, i),
                spec.session_ms,
                spec.rebalance_ms,
                group_instance_id=self._instance(step, i),
                reason="differential",
            )
            v = self.v[int(m.ApiKey.JOIN_GROUP)]
            return wm.join_to_wire(req, v), v
        if step.kind == "sync":
            state = self.members[i]
            ptype, pname = {
                "match": ("connect", state.protocol_name),
                "none": (None, None),
                "wrong": ("connect", "zzz"),
            }[step.sync_names]
            req = capi.SyncGroupRequest(
                self.group,
                self._mid(step, i),
                self._gen(step, i),
                spec.instance_id,
                ptype,
                pname,
                self._assignments(step, i),
            )
            v = self.v[int(m.ApiKey.SYNC_GROUP)]
            return wm.sync_to_wire(req, v), v
        if step.kind == "heartbeat":
            hb = capi.HeartbeatRequest(
                self.group, self._mid(step, i), self._gen(step, i), self._instance(step, i)
            )
            v = self.v[int(m.ApiKey.HEARTBEAT)]
            return wm.classic_heartbeat_to_wire(hb, v), v
        if step.kind == "leave":
            leaving = []
            for who, by in step.leavers:
                inst = self.seq.members[who].instance_id
                if by == "id":
                    leaving.append(capi.LeavingMember(self.members[who].member_id, inst, "bye"))
                elif by == "instance":
                    leaving.append(capi.LeavingMember("", inst or GHOST_INSTANCE, "admin"))
                else:
                    leaving.append(capi.LeavingMember(BOGUS_ID, None, "bye"))
            v = self.v[int(m.ApiKey.LEAVE_GROUP)]
            return wm.leave_to_wire(capi.LeaveGroupRequest(self.group, tuple(leaving)), v), v
        assert step.kind == "describe", step
        v = self.v[int(m.ApiKey.DESCRIBE_GROUPS)]
        return m.DescribeGroupsRequest(groups=[self.group], include_authorized_operations=False), v

    def send(self, token: int, step: Step) -> None:
        """Sends ``step`` as request ``token`` on its own task."""
        message, version = self.build(step)
        if step.kind in ("join", "sync"):
            self.sent_mid[token] = message.member_id
        if step.kind == "join":
            self.sent_protocols[token] = self._protocols(step, step.member)
        client_id = self.seq.members[step.member].client_id
        self.tasks[token] = asyncio.ensure_future(self.endpoint.request(message, version, client_id))
        self.kinds[token] = (step.kind, step.member)

    # --- answers

    def answered(self) -> set[int]:
        return {t for t, task in self.tasks.items() if task.done()}

    def alias(self, member_id: str) -> str:
        if not member_id:
            return ""
        if member_id not in self.aliases:
            # Kafka: <instance or client id>-<UUID>; the bridge: the same shape with a name-based UUID.
            head = member_id[:-37] if len(member_id) > 37 and member_id[-37] == "-" else f"?{member_id}"
            self.prefix_count[head] += 1
            self.aliases[member_id] = f"{head}#{self.prefix_count[head]}"
        return self.aliases[member_id]

    def take(self, tokens: list[int]) -> dict[int, Any]:
        """Answers of ``tokens`` (done), normalised, after updating the members' view."""
        out: dict[int, Any] = {}
        done = sorted(tokens)
        for t in done:  # aliases for ids first handed to their owners, in request order
            result = self.tasks[t].result()
            if self.kinds[t][0] == "join" and not isinstance(result, Closed) and result.member_id:
                self.alias(result.member_id)
        for t in done:
            self.seen.add(t)
            kind, i = self.kinds[t]
            result = self.tasks[t].result()
            self._observe(kind, i, result, t)
            out[t] = self.normalise(kind, result)
        return out

    def _observe(self, kind: str, i: int, msg: Any, token: int) -> None:
        state = self.members[i]
        if isinstance(msg, Closed):
            return
        if kind == "sync" and msg.error_code == 0:
            state.assignment = msg.assignment
            state.told = False
        if kind in ("heartbeat", "sync") and msg.error_code in (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION):
            state.told = True
        if kind != "join":
            return
        if msg.error_code in (0, MEMBER_ID_REQUIRED) and msg.member_id and msg.member_id != state.member_id:
            if state.member_id:
                state.old_ids.append(state.member_id)
            state.member_id = msg.member_id
        if msg.error_code == 0:
            state.joined_protocols = self.sent_protocols[token]
            state.generation = msg.generation_id
            state.protocol_name = msg.protocol_name
            state.leader = msg.leader == msg.member_id
            state.peers = tuple(x.member_id for x in msg.members)

    def normalise(self, kind: str, msg: Any) -> Any:
        if isinstance(msg, Closed):
            return {"closed": True}
        d = msg.to_dict()
        d.pop("throttle_time_ms", None)
        if kind == "join":
            d["member_id"] = self.alias(d["member_id"])
            d["leader"] = self.alias(d["leader"])
            for x in d["members"]:
                x["member_id"] = self.alias(x["member_id"])
            d["members"].sort(key=lambda x: x["member_id"])
        elif kind == "leave":
            for x in d.get("members") or []:
                x["member_id"] = self.alias(x["member_id"])
        elif kind == "describe":
            for g in d["groups"]:
                g.pop("error_message", None)
                for x in g["members"]:
                    x["member_id"] = self.alias(x["member_id"])
                g["members"].sort(key=lambda x: x["member_id"])
        return d


# --------------------------------------------------------------------------------- known differences


@dataclass
class Diff:
    """One difference: request ``token`` (``step``) and the two normalised answers (None: parked)."""

    seq: Sequence
    token: int
    step: Step
    kafka: Any
    bridge: Any
    member: MemberState | None = None
    """The bridge side's view of the step's member before this answer."""
    protocols: tuple[tuple[str, bytes], ...] = ()
    """A JoinGroup's protocols as sent."""


def _static_takeover_rebalances(d: Diff) -> bool:
    """A static member's new process (JoinGroup, member id "", known instance id) into a Stable
    connect group. Kafka keeps the generation and answers at once (the leader with
    ``skip_assignment``); the bridge starts a rebalance: the answer comes one generation later, or
    stays parked while the other members rejoin (docs/known-issues.md, docs/legacy-workers.md)."""
    if d.step.kind != "join" or d.step.mid != "empty" or not d.seq.members[d.step.member].static:
        return False
    if d.step.instance != "own" or not d.kafka or d.kafka.get("error_code") != 0:
        return False
    if d.bridge is None:  # parked: the rebalance waits for the others
        return True
    return (
        d.bridge.get("error_code") == 0
        and d.bridge["generation_id"] == d.kafka["generation_id"] + 1
        and not d.bridge["skip_assignment"]
    )


def _stale_join_refused(d: Diff) -> bool:
    """Deviation 18: a known member's JoinGroup whose protocols are byte for byte those it joined
    with, while its last SyncGroup gave it items: in a cooperative connect group when its
    allocation lacks them (Connect names what it runs in its next join, so these bytes are a copy
    from before that assignment), in an eager one when no answer told it to rejoin since. The
    bridge refuses it once with REBALANCE_IN_PROGRESS; Kafka takes it as the member's join
    (answers it, or parks it while the others rejoin). The id it names may be the client's own or
    an older one of the same client that is still a member (the client was given a new id by a
    MEMBER_ID_REQUIRED that it never joined with): to both coordinators that id is the member."""
    member = d.member
    if d.step.kind != "join" or d.step.mid not in ("own", "stale") or member is None or not member.assignment:
        return False
    if not d.bridge or d.bridge.get("error_code") != REBALANCE_IN_PROGRESS:
        return False
    if d.kafka is not None and d.kafka.get("error_code") != 0:
        return False
    if d.protocols != member.joined_protocols:
        return False
    if member.protocol_name == "default":
        return not member.told and bool(decode_assignment(member.assignment).items)
    if member.protocol_name not in ("compatible", "sessioned"):
        return False
    metadata = dict(d.protocols).get(member.protocol_name)
    if metadata is None:
        return False
    allocation = decode_subscription(metadata).allocation
    reported = frozenset(allocation.items) if isinstance(allocation, Assignment) else frozenset()
    return not frozenset(decode_assignment(member.assignment).items) <= reported


KNOWN_DIFFERENCES: dict[str, tuple[str, Any]] = {
    "static-takeover-rebalances": (
        "a restarted static Connect member in a Stable group gets a rebalance, not Kafka's "
        "same-generation answer with skip_assignment",
        _static_takeover_rebalances,
    ),
    "stale-join-refused": (
        "a member's JoinGroup repeating its earlier join, whose allocation lacks work its last "
        "assignment gave it (cooperative) or which no answer asked for since (eager), is refused "
        "once with REBALANCE_IN_PROGRESS",
        _stale_join_refused,
    ),
}
"""Documented differences (docs/classic-group.md, "Differences from Kafka's classic coordinator
(measured)") that end the comparison of their sequence. The third one, ``superseded-parked`` (deviation
4), does not: it is handled in the runner and the sequence goes on."""


def classify(diff: Diff) -> str | None:
    for name, (_, matches) in KNOWN_DIFFERENCES.items():
        if matches(diff):
            return name
    return None


# -------------------------------------------------------------------------------------------- runner


class Mismatch(AssertionError):
    pass


async def _wait_tasks(tasks: list[asyncio.Task[Any]], timeout: float) -> None:
    pending = [t for t in tasks if not t.done()]
    if pending:
        await asyncio.wait(pending, timeout=timeout)


def _superseded(kafka: SideRun, bridge: SideRun, candidates: set[int]) -> set[int]:
    """Known difference ``superseded-parked``: earlier parked requests the bridge answered and Kafka
    did not (Kafka drops the future of a parked JoinGroup/SyncGroup the member sends again)."""
    return {t for t in candidates if bridge.tasks[t].done() and not kafka.tasks[t].done()}


async def _agree(kafka: SideRun, bridge: SideRun, candidates: set[int]) -> None:
    """Until both sides have answered the same requests (a lagging side gets CATCH_UP_S), then a
    short settle for answers released together."""
    deadline = time.monotonic() + CATCH_UP_S
    stable_rounds = 0
    while True:
        a, b = kafka.answered(), bridge.answered() - _superseded(kafka, bridge, candidates)
        if a == b:
            stable_rounds += 1
            if stable_rounds >= 2:
                return
            await asyncio.sleep(SETTLE_S)
            continue
        stable_rounds = 0
        if time.monotonic() > deadline:
            return
        await asyncio.sleep(0.01)


def _follow_ups(step: Step, answer: Any) -> list[Step]:
    """What a Java client does next after ``answer`` (only for ``client`` steps)."""
    if not step.client or "closed" in answer:
        return []
    error = answer.get("error_code")
    if step.kind == "join" and error == MEMBER_ID_REQUIRED:
        return [replace(step, mid="own")]
    if step.kind == "join" and error == 0:
        return [Step("sync", step.member, client=True, assign=step.assign)]
    if step.kind in ("heartbeat", "sync") and error == REBALANCE_IN_PROGRESS:
        return [Step("join", step.member, client=True)]
    return []


def _known_partial_difference(
    seq: Sequence, sent: list[Step], kafka: SideRun, bridge: SideRun, a: set[int], b: set[int]
) -> str | None:
    """The known difference that explains why the two sides answered different requests (``a`` by
    Kafka, ``b`` by the bridge), or None. A request both answered differently comes first (the
    bridge refusing one join can leave Kafka's others released, the bridge's still parked); then
    requests only one side answered, when all of them have one known name."""
    members = {t: replace(bridge.members[sent[t].member]) for t in a | b}
    ka, ba = kafka.take(sorted(a)), bridge.take(sorted(b))

    def diff(t: int) -> Diff:
        return Diff(seq, t, sent[t], ka.get(t), ba.get(t), members[t], bridge.sent_protocols.get(t, ()))

    for t in sorted(a & b):
        if ka[t] != ba[t] and (name := classify(diff(t))) is not None:
            return name
    if not (a <= b or b <= a):
        return None
    names = {classify(diff(t)) for t in sorted(a ^ b)}
    return str(names.pop()) if len(names) == 1 and None not in names else None


async def _run_sequence(
    seq: Sequence,
    n: int,
    kafka_ep: Endpoint,
    bridge_ep: Endpoint,
    versions: dict[int, int],
    sides: list[SideRun],
) -> str:
    """Runs ``seq`` on both sides in lockstep; returns "" or the name of the known difference that
    ended it. Raises Mismatch for an unknown difference."""
    group = f"cdiff-{uuid.uuid4().hex[:10]}-{n}"
    kafka = SideRun(kafka_ep, group, seq, versions)
    bridge = SideRun(bridge_ep, group, seq, versions)
    sides += [kafka, bridge]
    log: list[str] = []
    candidates: set[int] = set()
    queue: list[Step] = list(seq.steps)
    sent: list[Step] = []
    while queue and len(sent) < MAX_REQUESTS:
        step = queue.pop(0)
        token = len(sent)
        sent.append(step)
        STATS["requests"] += 1
        if step.kind == "wait":
            await asyncio.sleep(step.wait_ms / 1000)
            log.append(f"{token}: wait {step.wait_ms} ms")
        else:
            kafka.send(token, step)
            bridge.send(token, step)
            if step.kind in ("join", "sync") and bridge.sent_mid[token]:
                # Earlier parked requests under the same member id: the bridge answers them when this
                # one replaces them (deviation 4), Kafka never does.
                candidates |= {
                    t
                    for t, (kind, _) in kafka.kinds.items()
                    if t != token
                    and kind == step.kind
                    and bridge.sent_mid.get(t) == bridge.sent_mid[token]
                    and t not in kafka.seen
                    and t not in bridge.seen
                }
            own = [kafka.tasks[token], bridge.tasks[token]]
            window = PARK_WINDOW_S if step.kind in ("join", "sync") else 30.0
            await _wait_tasks(own, window)
            if any(t.done() for t in own):
                await _wait_tasks(own, CATCH_UP_S)
        await _agree(kafka, bridge, candidates)
        for t in sorted(_superseded(kafka, bridge, candidates)):
            [answer] = bridge.take([t]).values()
            if answer.get("error_code") != REBALANCE_IN_PROGRESS:
                raise Mismatch(
                    _report(seq, sent, t, log, f"superseded request answered {answer} by the bridge")
                )
            kafka.tasks[t].cancel()
            kafka.seen.add(t)
            candidates.discard(t)
            log.append(
                f"{t}: superseded by {token}: bridge {answer}, kafka no answer (known: superseded-parked)"
            )
            STATS["known:superseded-parked"] += 1
        candidates -= kafka.seen
        a = kafka.answered() - kafka.seen
        b = bridge.answered() - bridge.seen
        if a != b:
            name = _known_partial_difference(seq, sent, kafka, bridge, a, b)
            if name is not None:
                STATS[f"known:{name}"] += 1
                return name
            what = f"answered requests differ after {token}: kafka {sorted(a)} bridge {sorted(b)}"
            raise Mismatch(_report(seq, sent, token, log, what))
        members = {t: replace(bridge.members[sent[t].member]) for t in a}
        ka, ba = kafka.take(sorted(a)), bridge.take(sorted(b))
        follow: list[Step] = []
        for t in sorted(a):
            _coverage(sent[t].kind, ka[t])
            if ka[t] != ba[t]:
                name = classify(
                    Diff(seq, t, sent[t], ka[t], ba[t], members[t], bridge.sent_protocols.get(t, ()))
                )
                if name is None:
                    what = f"request {t} answers differ:\n kafka  {ka[t]}\n bridge {ba[t]}"
                    raise Mismatch(_report(seq, sent, t, log, what))
                STATS[f"known:{name}"] += 1
                return name
            log.append(f"{t}: {sent[t].short()} -> {ka[t]}")
            follow += _follow_ups(sent[t], ka[t])
        queue[:0] = follow
    parked = sorted(kafka.tasks.keys() - kafka.seen)
    assert parked == sorted(bridge.tasks.keys() - bridge.seen)
    STATS["parked at end"] += len(parked)
    return ""


async def run_sequence(
    seq: Sequence, n: int, kafka_ep: Endpoint, bridge_ep: Endpoint, versions: dict[int, int]
) -> str:
    sides: list[SideRun] = []
    try:
        return await _run_sequence(seq, n, kafka_ep, bridge_ep, versions, sides)
    except Mismatch as exc:
        if not COLLECT:
            raise
        with open(COLLECT, "a", encoding="utf-8") as out:
            out.write(f"{'=' * 100}\n{exc}\n")
        STATS["mismatches"] += 1
        return "mismatch"
    finally:
        for side in sides:
            for task in side.tasks.values():
                task.cancel()


def _coverage(kind: str, answer: Any) -> None:
    """What the sequences reached (printed with the totals): error codes per API, group states."""
    if "closed" in answer:
        STATS[f"cov {kind} closed"] += 1
    elif kind == "describe":
        for g in answer["groups"]:
            STATS[f"cov describe {g['group_state']} {len(g['members'])}m"] += 1
    else:
        STATS[f"cov {kind} error {answer.get('error_code')}"] += 1
        if kind == "join" and answer.get("error_code") == 0:
            STATS[f"cov join gen{min(answer['generation_id'], 4)} {len(answer['members'])}m"] += 1


def _report(seq: Sequence, sent: list[Step], token: int, log: list[str], what: str) -> str:
    return "\n".join(
        [
            f"difference at request {token} ({sent[token].short()}): {what}",
            seq.describe(),
            "requests and their answers so far (equal on both sides, member ids as aliases):",
            *log,
        ]
    )


@dataclass
class Rig:
    kafka_coordinator: tuple[str, int]
    """Where FindCoordinator sent us (the broker of __consumer_offsets' only partition)."""
    bridge: BridgeThread
    versions: dict[int, int]
    """Per API key: Java Connect 4.3.1's newest version, capped by both sides' ApiVersions."""
    counter: int = 0

    def run_batch(self, batch: list[Sequence]) -> list[str]:
        UNIQUE.update(repr(seq) for seq in batch)

        async def go() -> list[str]:
            kafka_ep = Endpoint("kafka", *self.kafka_coordinator)
            bridge_ep = Endpoint("bridge", *self.bridge.bootstrap)
            try:
                jobs = []
                for seq in batch:
                    self.counter += 1
                    jobs.append(run_sequence(seq, self.counter, kafka_ep, bridge_ep, self.versions))
                return list(await asyncio.gather(*jobs))
            finally:
                await kafka_ep.close()
                await bridge_ep.close()

        result = asyncio.run(go())
        STATS["sequences"] += len(batch)
        return result


@pytest.fixture(scope="module")
def rig(kafka_broker: Any) -> Any:
    host, port = kafka_broker.bootstrap.rsplit(":", 1)
    bridge = BridgeThread()
    try:

        async def setup() -> tuple[dict[int, int], tuple[str, int], tuple[str, int]]:
            theirs = await api_versions(host, int(port))
            ours = await api_versions(*bridge.bootstrap)
            versions = {k: min(v, theirs[k], ours[k]) for k, v in JAVA_MAX.items()}
            fc = versions[int(m.ApiKey.FIND_COORDINATOR)]
            kc = await find_coordinator(host, int(port), "cdiff-probe", fc)
            bc = await find_coordinator(*bridge.bootstrap, "cdiff-probe", fc)
            return versions, kc, bc

        versions, kc, bc = asyncio.run(setup())
        assert bc == bridge.bootstrap
        yield Rig(kc, bridge, versions)
    finally:
        bridge.stop()
        print(f"\nclassic differential: {dict(sorted(STATS.items()))}, distinct sequences {len(UNIQUE)}")


HYPOTHESIS = dict(
    derandomize=True,
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)


@settings(max_examples=6, **HYPOTHESIS)
@given(batch=st.lists(sequences("fast"), min_size=32, max_size=32, unique_by=repr))
def test_fast_sequences(rig: Rig, batch: list[Sequence]) -> None:
    """Joins, syncs, heartbeats, leaves and describes with no timer expiring (192 sequences, all
    distinct). Batches of 32: a sequence spends most of its time waiting for parked answers, so a
    batch takes about as long as its slowest sequence; 12 batches of 16 covered every answer, group
    state and known difference that 22 batches of 8 did, in two thirds of the time, and 6 batches
    of 32 cover every one that 12 batches of 16 did (the same counts within a few), in 36 s
    instead of 56 s."""
    rig.run_batch(batch)


@settings(max_examples=1, **HYPOTHESIS)
@given(batch=st.lists(sequences("rebalance"), min_size=28, max_size=28, unique_by=repr))
def test_rebalance_timeouts(rig: Rig, batch: list[Sequence]) -> None:
    """Join and sync timers (rebalance timeout 1.5 s) expiring during waits (28 sequences, in one
    batch: its waits then run once, side by side, instead of in two batches of 14 one after the
    other)."""
    rig.run_batch(batch)


@settings(max_examples=1, **HYPOTHESIS)
@given(batch=st.lists(sequences("session"), min_size=14, max_size=14, unique_by=repr))
def test_session_timeouts(rig: Rig, batch: list[Sequence]) -> None:
    """Session expiry at the broker's minimum session timeout, 6 s (14 sequences)."""
    rig.run_batch(batch)


def _empty_group_requests(versions: dict[int, int]) -> dict[str, tuple[Any, int]]:
    """JoinGroup, SyncGroup, Heartbeat and LeaveGroup naming the empty group id, at the versions the
    differential uses (a SyncGroup with protocol type and name, which v5 makes mandatory)."""
    v = {
        name: versions[int(key)]
        for name, key in (
            ("join", m.ApiKey.JOIN_GROUP),
            ("sync", m.ApiKey.SYNC_GROUP),
            ("heartbeat", m.ApiKey.HEARTBEAT),
            ("leave", m.ApiKey.LEAVE_GROUP),
        )
    }
    protos = ((name, b"") for name in PROTOCOL_MENU[0])
    join = capi.JoinGroupRequest("", "", "connect", tuple(protos), 30_000, 60_000)
    sync = capi.SyncGroupRequest("", BOGUS_ID, 1, None, "connect", "sessioned", ())
    leave = capi.LeaveGroupRequest("", (capi.LeavingMember(BOGUS_ID),))
    return {
        "join": (wm.join_to_wire(join, v["join"]), v["join"]),
        "sync": (wm.sync_to_wire(sync, v["sync"]), v["sync"]),
        "heartbeat": (
            wm.classic_heartbeat_to_wire(capi.HeartbeatRequest("", BOGUS_ID, 1), v["heartbeat"]),
            v["heartbeat"],
        ),
        "leave": (wm.leave_to_wire(leave, v["leave"]), v["leave"]),
    }


def test_empty_group_id(rig: Rig) -> None:
    """Kafka's GroupCoordinatorService answers INVALID_GROUP_ID to every classic call naming the
    empty group id, before it looks for a group (LeaveGroup: top-level, no member list). The bridge
    answered UNKNOWN_MEMBER_ID to SyncGroup and Heartbeat, and NONE with an unknown member to
    LeaveGroup."""

    async def go() -> dict[str, tuple[Any, Any]]:
        kafka_ep = Endpoint("kafka", *rig.kafka_coordinator)
        bridge_ep = Endpoint("bridge", *rig.bridge.bootstrap)
        try:
            out = {}
            for name, (msg, version) in _empty_group_requests(rig.versions).items():
                theirs = await kafka_ep.request(msg, version, "cdiff-empty")
                ours = await bridge_ep.request(msg, version, "cdiff-empty")
                out[name] = (theirs, ours)
            return out
        finally:
            await kafka_ep.close()
            await bridge_ep.close()

    for name, (theirs, ours) in asyncio.run(go()).items():
        assert theirs.error_code == int(ErrorCode.INVALID_GROUP_ID), (name, theirs)
        assert ours.error_code == theirs.error_code, (name, theirs, ours)
        if name == "leave":
            assert list(ours.members or ()) == list(theirs.members or ()) == [], (theirs, ours)
