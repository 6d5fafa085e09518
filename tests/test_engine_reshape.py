"""Pieces of issue 13's reshape that one builder now serves in several places: timer keys, the
classic member snapshot, the generation check of SyncGroup/Heartbeat, a deleted connect group
(live and replayed), and the one table of APIs the codec and the bridge share. Pure, no sockets."""

from __future__ import annotations

import ast
import enum
import importlib
import inspect
import pathlib
import pkgutil
import textwrap
from typing import Protocol

import pytest

from connect_bridge.bridge.coordination import api_table as t
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.codecs.messages import APIS, KNOWN_APIS, ApiKey, ApiSpec, RelayedApi
from connect_bridge.state.adoption.observation import UpstreamMember
from connect_bridge.state.adoption.steps import OwnershipPhases
from connect_bridge.state.api import LEAVE_EPOCH, HeartbeatRequest
from connect_bridge.state.classic import api as capi
from connect_bridge.state.classic.group import ClassicGroup
from connect_bridge.state.classic.member import ClassicMember
from connect_bridge.state.classic.records import ClassicJoin, ClassicMemberSnapshot
from connect_bridge.state.config import CoordinatorConfig
from connect_bridge.state.connect.group import ConnectGroup
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.records import RecordType
from connect_bridge.state.timers import TimerKey, TimerKind

G = "g"


def test_named_timer_keys_take_a_member_exactly_when_per_member() -> None:
    assert TimerKey.session(G, "m") == TimerKey(TimerKind.SESSION, G, "m")
    assert TimerKey.held(G) == TimerKey(TimerKind.HELD, G, "")
    assert TimerKey.legacy_join is TimerKey.legacy_join  # built once: a heartbeat re-arms keys often
    with pytest.raises(TypeError):
        TimerKey.held(G, "m")
    with pytest.raises(TypeError):
        TimerKey.revoke(G)


def test_a_classic_member_and_an_upstream_member_snapshot_alike() -> None:
    protocols = (("sessioned", b"meta"),)
    mine = ClassicMember("m", "i", "c", "h", 3000, 1000, "connect", protocols, b"asg", principal="User:a")
    upstream = UpstreamMember("m", "i", "c", "h", 3000, 1000, protocols, joined=True, assignment=b"asg")
    assert mine.to_snapshot() == ClassicMemberSnapshot.of(upstream, b"asg", "User:a")
    assert ClassicMember.from_snapshot(mine.to_snapshot(), "connect").to_snapshot() == mine.to_snapshot()


def test_sync_and_heartbeat_share_the_generation_check() -> None:
    coord = GroupCoordinator()
    protocols = (("sessioned", b""),)
    required = coord.classic_join(capi.JoinGroupRequest(G, "", "connect", protocols, 10_000, 10_000), 0)
    assert required is not None and required.error_code == ErrorCode.MEMBER_ID_REQUIRED
    member = required.member_id
    coord.classic_join(capi.JoinGroupRequest(G, member, "connect", protocols, 10_000, 10_000, token="j"), 0)
    deadline = coord.next_deadline()
    assert deadline is not None
    coord.advance(deadline)
    [(_, joined)] = coord.drain_responses()
    stale = capi.HeartbeatRequest(G, member, joined.generation_id + 1)
    assert coord.classic_heartbeat(stale, deadline).error_code == ErrorCode.ILLEGAL_GENERATION
    unknown = capi.SyncGroupRequest(
        G, "nobody", joined.generation_id, None, "connect", "sessioned", token="s"
    )
    assert coord.classic_sync(unknown, deadline).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_a_deleted_connect_group_is_dropped_live_and_in_replay() -> None:
    """Its tombstones are applied as written (no record is left unapplied); the retired object keeps
    the epoch it ended at, and replay drops the group as the live coordinator did."""
    config = CoordinatorConfig(scheduled_rebalance_max_delay_ms=0)
    coord = GroupCoordinator(config)
    coord.connect_heartbeat(HeartbeatRequest(G, "w1", 0, rebalance_timeout_ms=1000, url="http://w1"), 0)
    coord.connect_heartbeat(HeartbeatRequest(G, "w1", LEAVE_EPOCH), 10)
    group = coord.groups[G]
    assert isinstance(group, ConnectGroup) and not group.members
    epoch = group.group_epoch
    assert epoch > 0
    coord.classic_join(capi.JoinGroupRequest(G, "", "connect", (("sessioned", b""),)), 20)
    assert isinstance(coord.groups[G], ClassicGroup)
    assert group.group_epoch == epoch and not group.target and group.assignment_epoch == 0
    records = coord.drain_records()
    assert any(r.type is RecordType.GROUP_METADATA and r.value is None for r in records)
    connect_only = [r for r in records if r.type is not RecordType.CLASSIC_GROUP]
    fresh = GroupCoordinator(config)
    fresh.replay(connect_only, 30)
    assert G not in fresh.groups


def test_every_codec_entry_has_one_bridge_row_and_relayed_caps_come_from_the_codec() -> None:
    assert [row.key for row in t.API_TABLE if row.key in KNOWN_APIS] == [row.key for row in t.API_TABLE]
    assert sorted(row.key for row in t.API_TABLE) == sorted(api.api_key for api in APIS)
    for api in APIS:
        row = t.ROWS[api.api_key]
        assert row.api is api
        if isinstance(api, ApiSpec):
            assert api.api_key == api.request.API_KEY
        elif isinstance(api, RelayedApi) and api.max_version is not None:
            assert t.RELAY_CAPS[api.api_key] <= api.max_version
    assert t.ROWS[ApiKey.DESCRIBE_CLUSTER].response_class is KNOWN_APIS[ApiKey.DESCRIBE_CLUSTER].response


def test_a_group_is_one_state_class_and_steps_read_no_private_parts() -> None:
    """State apart from logic (docs/architecture.md): each group is one state class, not a class
    spread across modules by inheritance, and no state module reads another object's private
    attributes (``x._y`` where ``x`` is neither ``self``/``cls`` nor a class of the same module)."""
    assert ConnectGroup.__mro__ == (ConnectGroup, object)
    assert ClassicGroup.__mro__ == (ClassicGroup, object)
    state_dir = pathlib.Path(inspect.getfile(ConnectGroup)).parents[1]
    reads = []
    for path in sorted(state_dir.rglob("*.py")):
        tree = ast.parse(path.read_text())
        own = {n.name for n in tree.body if isinstance(n, ast.ClassDef)} | {"self", "cls"}
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and not (isinstance(node.value, ast.Name) and node.value.id in own)
            ):
                reads.append(f"{path.relative_to(state_dir)}:{node.lineno} {ast.unparse(node)}")
    assert reads == []


_GROUP_CLASSES = frozenset({"ClassicGroup", "ConnectGroup"})
_MUTATORS = frozenset("clear pop popitem update add discard append extend insert setdefault remove".split())
"""Methods that change a list, dict or set in place."""


def _is_group_class(annotation: ast.expr | None) -> bool:
    """``ClassicGroup``, ``ConnectGroup``, a union or optional of one, or their string forms."""
    if annotation is None:
        return False
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        annotation = ast.parse(annotation.value, mode="eval").body
    return any(isinstance(n, ast.Name) and n.id in _GROUP_CLASSES for n in ast.walk(annotation))


def _group_names(tree: ast.AST) -> set[str]:
    """The names a module uses for a group: ``group``, and any name typed as one (an argument or a
    variable annotation, an ``isinstance`` check, a group's constructor assigned to it)."""
    names = {"group"}
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and _is_group_class(node.annotation):
            names.add(node.arg)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if _is_group_class(node.annotation):
                names.add(node.target.id)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "isinstance"
            and len(node.args) == 2
            and isinstance(node.args[0], ast.Name)
            and _is_group_class(node.args[1])
        ):
            names.add(node.args[0].id)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            func = node.value.func
            if isinstance(func, ast.Name) and func.id in _GROUP_CLASSES:
                names.update(x.id for x in node.targets if isinstance(x, ast.Name))
    return names


def _is_group(node: ast.expr, names: set[str]) -> bool:
    """A group: one of ``names``, or an entry of a ``groups`` mapping (``self.groups[gid]``,
    ``self.groups.get(gid)``)."""
    if isinstance(node, ast.Name):
        return node.id in names
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        node = node.func.value
    elif isinstance(node, ast.Subscript):
        node = node.value
    else:
        return False
    return (isinstance(node, ast.Attribute) and node.attr == "groups") or (
        isinstance(node, ast.Name) and node.id == "groups"
    )


def _inside_group(node: ast.expr, names: set[str]) -> bool:
    """``node`` is an attribute or item of a group, at any depth (``group.x``, ``group.x[k]``,
    ``group.x.y``), not the group itself."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
        if _is_group(node, names):
            return True
    return False


def _unpacked(targets: list[ast.expr]) -> list[ast.expr]:
    """The single targets of ``a, (b, *c) = ...``."""
    out: list[ast.expr] = []
    for target in targets:
        if isinstance(target, (ast.Tuple, ast.List)):
            out += _unpacked(target.elts)
        elif isinstance(target, ast.Starred):
            out += _unpacked([target.value])
        else:
            out.append(target)
    return out


def group_mutations(source: str) -> list[str]:
    """Statements of ``source`` that change a group's state other than through its own methods:
    an assignment, augmented assignment or deletion of an attribute or item of a group (at any
    depth), a mutating container method called on one of its attributes, ``setattr``/``delattr``."""
    tree = ast.parse(source)
    names = _group_names(tree)
    found = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor)):
            targets = [node.target]
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            targets = [item.optional_vars for item in node.items if item.optional_vars is not None]
        found += [f"{node.lineno}: {ast.unparse(x)}" for x in _unpacked(targets) if _inside_group(x, names)]
        if isinstance(node, ast.Call):
            func = node.func
            if (
                isinstance(func, ast.Attribute)
                and func.attr in _MUTATORS
                and _inside_group(func.value, names)
            ):
                found.append(f"{node.lineno}: {ast.unparse(func)}()")
            elif isinstance(func, ast.Name) and func.id in ("setattr", "delattr") and node.args:
                if _is_group(node.args[0], names) or _inside_group(node.args[0], names):
                    found.append(f"{node.lineno}: {func.id}({ast.unparse(node.args[0])}, ...)")
    return found


def test_the_mutation_finder_finds_each_form_and_spares_a_groups_own_methods() -> None:
    """The finder below must be able to fail: each form of change to a group's state is found,
    and a call of the group's own method, or a change of the coordinator's mapping, is not."""
    changes = [
        "group.generation_id = 1",
        "group.generation_id += 1",
        "group.eager_holders |= {m}",
        "group.reported[mid] = owned",
        "del group.revocation_deadlines[mid]",
        "group.pending_sync.clear()",
        "group.legacy_members.returning.pop(mid, None)",
        "self.groups[gid].view = view",
        "self.groups.get(gid).touched = t",
        "setattr(group, 'x', 1)",
        "def f(g: ClassicGroup) -> None:\n    g.members[m] = x",
        "def f(g: 'ConnectGroup | None') -> None:\n    g.told[m] = h",
        "if isinstance(existing, ConnectGroup):\n    existing.downgrade_pending = True",
        "a, group.x = 1, 2",
        "for group.x in xs:\n    pass",
        "with f() as group.x:\n    pass",
    ]
    for source in changes:
        assert group_mutations(source), source
    own = [
        "group.add(member, parked)",
        "group.remove(mid)",
        "self.groups[gid] = group",
        "del self.groups[gid]",
        "self.groups.pop(gid)",
        "member.assignment = b''",
        "x = group.members.get(mid)",
    ]
    for source in own:
        assert group_mutations(source) == [], source


def test_nothing_outside_a_groups_state_module_assigns_its_attributes() -> None:
    """State apart from logic (docs/architecture.md): a step decides, the state class applies.
    Outside ``classic/state.py`` and ``connect/state.py`` no module of the engine assigns, augments
    or deletes an attribute or item of a ``ClassicGroup`` or ``ConnectGroup`` (nor of what they
    hold, such as ``group.legacy_members``), or calls a mutating container method on one: every
    change goes through a method of the state class whose name says what it means."""
    state_dir = pathlib.Path(inspect.getfile(ConnectGroup)).parents[1]
    state_modules = {state_dir / "classic" / "state.py", state_dir / "connect" / "state.py"}
    found = [
        f"{path.relative_to(state_dir)}:{where}"
        for path in sorted(state_dir.rglob("*.py"))
        if path not in state_modules
        for where in group_mutations(path.read_text())
    ]
    assert found == []


def _foreign_state_bases(cls: type) -> list[str]:
    """The direct bases of ``cls`` defined in a module of ``state/`` other than its own that are
    not a genuine base type (a ``typing.Protocol``, an exception, an enum): a class spread across
    modules by inheritance, each part using state the other declares."""
    return [
        f"{cls.__module__}.{cls.__qualname__}({base.__module__}.{base.__qualname__})"
        for base in cls.__bases__
        if base.__module__.startswith("connect_bridge.state.")
        and base.__module__ != cls.__module__
        and not getattr(base, "_is_protocol", False)
        and not issubclass(base, (BaseException, enum.Enum))
    ]


def test_no_engine_class_is_spread_across_modules_by_inheritance() -> None:
    """State apart from logic (docs/architecture.md): a part of the engine that keeps its own state
    is an object another one holds and calls through its public methods, not a base class that
    redeclares the state of the class inheriting it. The check finds such a base, and spares
    protocols, exceptions and enums; then no class of ``state/`` has one, and the coordinator holds
    the adoption steps rather than inheriting them."""
    spread = type("Spread", (OwnershipPhases,), {"__module__": "connect_bridge.state.coordinator"})
    assert _foreign_state_bases(spread) == [
        "connect_bridge.state.coordinator.Spread(connect_bridge.state.adoption.steps.OwnershipPhases)"
    ]
    joined = type("Joined", (ClassicJoin, Protocol), {"__module__": "connect_bridge.state.connect.x"})
    assert _foreign_state_bases(joined) == []
    own = type("Own", (GroupCoordinator,), {"__module__": GroupCoordinator.__module__})
    assert _foreign_state_bases(own) == []

    state = importlib.import_module("connect_bridge.state")
    found = []
    for info in pkgutil.walk_packages(state.__path__, "connect_bridge.state."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if inspect.isclass(value) and value.__module__ == info.name:
                found += _foreign_state_bases(value)
    assert found == []
    assert GroupCoordinator.__mro__ == (GroupCoordinator, object)


def _private_names(cls: type) -> set[str]:
    """The private attributes ``cls`` assigns on ``self`` and its private methods."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
        ):
            names.add(node.attr)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def _reaches_into(source: str, names: set[str]) -> list[str]:
    """Reads and writes of ``x.name`` for a name of ``names``, where ``x`` is not ``self``/``cls``
    (another object's private attribute, such as ``coordinator._adoption._unsynced_rounds``)."""
    return [
        f"{node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute)
        and node.attr in names
        and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
    ]


def test_nothing_outside_the_adoption_package_touches_the_adoption_steps_private_state() -> None:
    """The coordinator and the adoption steps meet at the steps' public methods and constructor
    (docs/engine.md): no module of the bridge, the drills, the tests or the benchmarks outside
    ``state/adoption/`` reads or writes a private attribute of ``OwnershipPhases``."""
    names = _private_names(OwnershipPhases)
    assert {"_release_rejoins", "_unsynced_rounds", "_released_rounds", "_groups", "_owe_rounds"} <= names
    assert _reaches_into("coordinator._adoption._release_rejoins.add(g)", names) == [
        "1: coordinator._adoption._release_rejoins"
    ]
    assert _reaches_into("self._release_rejoins = set()\nself._adoption.releasing(g)", names) == []

    src = pathlib.Path(inspect.getfile(GroupCoordinator)).parents[1]
    adoption = src / "state" / "adoption"
    root = src.parents[1]
    found = [
        f"{path.relative_to(root)}:{where}"
        for top in (src, root / "tests", root / "benchmarks")
        for path in sorted(top.rglob("*.py"))
        if adoption not in path.parents
        for where in _reaches_into(path.read_text(), names)
    ]
    assert found == []
