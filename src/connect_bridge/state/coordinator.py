"""The group coordinator: routes typed requests to groups by id and type, converts groups between
``classic`` and ``connect``, and owns the shared timers.

Like Apache Kafka's GroupMetadataManager it is one deterministic state machine for many groups:
callers hand in requests and ``now_ms`` and call ``advance(now_ms)`` at the next deadline. After a
step, :meth:`GroupCoordinator.result` is its effects as one value (``state.result``: the records to
make durable before revealing the response, parked classic answers released, the next deadline),
built from the groups the step changed; ``bridge/coordination/runtime.py`` applies it. ``drain_records`` and
``drain_responses`` take parts of the same effects, for callers that drive the engine by hand
(tests, drills).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any, TypeVar

from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.state import empty_groups
from connect_bridge.state.adoption.handback import removed_by_admin, revoke_all
from connect_bridge.state.adoption.observation import UpstreamGeneration
from connect_bridge.state.adoption.records import OwnershipState, OwnershipTable
from connect_bridge.state.adoption.steps import OwnershipPhases
from connect_bridge.state.api import (
    DescribedGroup,
    HeartbeatRequest,
    HeartbeatResponse,
    InstallAssignmentRequest,
    InstallAssignmentResponse,
    PrepareAssignmentRequest,
    PrepareAssignmentResponse,
)
from connect_bridge.state.classic import api as capi
from connect_bridge.state.classic import group as classic_steps
from connect_bridge.state.classic.api import EAGER_PROTOCOL, PROTOCOL_TYPE_CONNECT
from connect_bridge.state.classic.group import ClassicDescribedGroup, ClassicGroup, ClassicGroupState
from connect_bridge.state.classic.leader_memory import ForgetRounds
from connect_bridge.state.classic.records import Protocols
from connect_bridge.state.config import CoordinatorConfig
from connect_bridge.state.connect import group as connect_steps
from connect_bridge.state.connect import legacy_steps
from connect_bridge.state.connect.group import ConnectGroup, check_heartbeat
from connect_bridge.state.errors import RequestError
from connect_bridge.state.holds import timer_removal_hold_ms
from connect_bridge.state.migration.conversion import ConversionError, downgrade, may_run_any, upgrade
from connect_bridge.state.model import ConfigView, GroupType
from connect_bridge.state.ownership import refusal, split_leaving
from connect_bridge.state.records import Record, RecordType
from connect_bridge.state.result import CoordinatorResult, R, Touched
from connect_bridge.state.timers import TimerKey, TimerKind, Timers

_PREPARING = ClassicGroupState.PREPARING_REBALANCE

Group = ConnectGroup | ClassicGroup
G = TypeVar("G", ConnectGroup, ClassicGroup)


class GroupCoordinator:
    """Routes requests to groups and converts them; adoption and the hand-back are delegated to an
    :class:`~connect_bridge.state.adoption.steps.OwnershipPhases` it holds, which reaches the
    groups only through what the constructor hands it (the groups mapping, the record queue,
    :meth:`_flush`, :meth:`_after` and :meth:`_new_classic`)."""

    def __init__(self, config: CoordinatorConfig | None = None) -> None:
        self.config = config or CoordinatorConfig()
        self.timers = Timers()
        self.groups: dict[str, Group] = {}
        self.views: dict[str, ConfigView] = {}
        self.default_view = ConfigView()
        self._records: list[Record] = []
        self._forget_rounds: dict[str, ForgetRounds] = {}
        """Group id -> the unsynced leader rounds of the classic group that replaces the emptied
        connect group it named (``classic.join.forget_round``), until that classic group is
        persisted and carries them itself (an unpersisted empty one is dropped after each
        JoinGroup). Soft."""
        self._responses: list[tuple[object, object]] = []
        self._classic_states: dict[str, ClassicGroupState] = {}
        """Each classic group's state as the last result reported it (``classic_changed``)."""
        self._classic_changed: set[str] = set()
        """Classic groups changed since the last result (gathered, not reported yet)."""
        self._touched: Touched = {}
        """Groups changed since their effects were last gathered (``state.result.Touched``)."""
        self._empty_armed: set[str] = set()
        """Groups whose ``empty`` timer is armed (``state.empty_groups``): soft, as the timers are."""
        self._adoption = OwnershipPhases(
            self.config,
            self.groups,
            queue_records=self._queue_records,
            flush=self._flush,
            after=self._after,
            new_classic=self._new_classic,
        )
        """Adoption, ownership phases and the hand-back (docs/adoption.md)."""

    @property
    def ownership(self) -> OwnershipTable:
        """Which side coordinates each adopted or released group (docs/adoption.md)."""
        return self._adoption.table

    # ------------------------------------------------------------------ groups
    def view(self, group_id: str) -> ConfigView:
        return self.views.get(group_id, self.default_view)

    def _new_connect(self, group_id: str) -> ConnectGroup:
        self._forget_rounds.pop(group_id, None)
        group = self._tracked(ConnectGroup(group_id, self.config, self.timers, self.view(group_id)))
        self.groups[group_id] = group
        return group

    def _new_classic(self, group_id: str, forget_rounds: ForgetRounds | None = None) -> ClassicGroup:
        group = self._tracked(ClassicGroup(group_id, self.config, self.timers, forget_rounds=forget_rounds))
        self.groups[group_id] = group
        return group

    def _tracked(self, group: G) -> G:
        """``group``, marking itself in :attr:`_touched` whenever it changes (and marked now)."""
        group.report_changes_to(self._touched)
        self._touched[group.group_id] = None
        return group

    def _full(self) -> bool:
        """No room for another group (``max_groups``): memory and per-group work stay bounded."""
        return len(self.groups) >= self.config.max_groups

    def _full_message(self) -> str:
        # Retriable for the client (Kafka's answer while a coordinator cannot take the group):
        # a worker keeps trying and gets in once another group is gone.
        return f"the bridge coordinates its maximum of {self.config.max_groups} groups"

    def connect_group(self, group_id: str) -> ConnectGroup | None:
        group = self.groups.get(group_id)
        return group if isinstance(group, ConnectGroup) else None

    def set_config(self, group_id: str, view: ConfigView, now_ms: int) -> None:
        if self.views.get(group_id) == view:
            return
        group = self.groups.get(group_id)
        if group is None:
            group = self._new_connect(group_id)
        self.views[group_id] = view
        self._records.append(Record(RecordType.CONFIG, group_id, "", view))
        self._touched[group_id] = None
        if isinstance(group, ConnectGroup):
            connect_steps.set_config(group, view, now_ms)

    def _queue_records(self, records: Iterable[Record]) -> None:
        self._records.extend(records)

    def _flush(self, group: Group) -> None:
        self._touched[group.group_id] = None
        self._records.extend(group.drain_records())
        if isinstance(group, ClassicGroup):
            self._responses.extend(group.drain_responses())

    # ------------------------------------------------------------------ conversions
    def _upgrade(self, classic: ClassicGroup, now_ms: int) -> ConnectGroup | str:
        """Convert ``classic`` for a joining new-protocol worker, or say why not."""
        if classic.members:
            if not self.config.migration_policy.allows_upgrade:
                return f"migration policy {self.config.migration_policy.value} does not allow upgrades"
            if len(classic.members) >= self.config.max_group_size:
                return f"group {classic.group_id} is at its maximum size"
            if classic.protocol_type not in (None, PROTOCOL_TYPE_CONNECT):
                return f"group {classic.group_id} has protocol type {classic.protocol_type!r}"
        group = self._tracked(
            ConnectGroup(classic.group_id, self.config, self.timers, self.view(classic.group_id))
        )
        try:
            if classic.members:
                upgrade(classic, group, now_ms)
        except ConversionError as exc:
            return str(exc)
        self._flush(classic)
        classic_steps.delete(classic, now_ms, parked_error=ErrorCode.REBALANCE_IN_PROGRESS)
        self._flush(classic)
        self.groups[classic.group_id] = group
        self._flush(group)
        return group

    def _after(self, group_id: str, now_ms: int) -> None:
        """Flush a group's effects and run a pending downgrade."""
        self._touched[group_id] = None
        group = self.groups.get(group_id)
        if group is None:
            return
        if isinstance(group, ClassicGroup):
            self._adoption.rejoin_after_early_join(group, now_ms)
        self._flush(group)
        if isinstance(group, ConnectGroup):
            if connect_steps.downgrade_due(group, self.config.migration_policy.allows_downgrade):
                classic = self._tracked(ClassicGroup(group_id, self.config, self.timers))
                downgrade(group, classic, now_ms)
                self._flush(group)
                self.groups[group_id] = classic
                self._flush(classic)
        elif isinstance(group, ClassicGroup) and group.state is ClassicGroupState.DEAD:
            del self.groups[group_id]
            self._disarm_empty(group_id)
            return
        elif isinstance(group, ClassicGroup) and not group.persisted and not group.members:
            del self.groups[group_id]
            self._disarm_empty(group_id)
            return
        self._arm_empty(group_id, now_ms)

    def _arm_empty(self, group_id: str, now_ms: int) -> None:
        """The group's ``empty`` timer runs while it is deletable (``state.empty_groups``). A group
        with members whose timer is not armed is left at once: most steps are of such groups."""
        group = self.groups.get(group_id)
        if group is None or (group.members and group_id not in self._empty_armed):
            return
        phase = self.ownership.state(group_id)
        if empty_groups.arm_or_cancel(group, phase, self.timers, self.config.empty_group_expiry_ms, now_ms):
            self._empty_armed.add(group_id)
        else:
            self._empty_armed.discard(group_id)

    def _disarm_empty(self, group_id: str) -> None:
        self.timers.cancel(TimerKey.empty(group_id))
        self._empty_armed.discard(group_id)

    def _expire_empty(self, group_id: str, now_ms: int) -> None:
        """An ``empty`` timer fired: delete the group if it is still deletable (its tombstones go
        out with the step's records), else let the next step re-arm it."""
        self._empty_armed.discard(group_id)
        group = self.groups.get(group_id)
        if group is None or not empty_groups.deletable(group, self.ownership.state(group_id), self.timers):
            self._arm_empty(group_id, now_ms)
            return
        empty_groups.delete(group, now_ms)
        self._flush(group)
        if self.groups.get(group_id) is group:
            del self.groups[group_id]

    # ------------------------------------------------------------------ new protocol APIs
    def connect_heartbeat(self, req: HeartbeatRequest, now_ms: int) -> HeartbeatResponse:
        if not req.group_id:
            return HeartbeatResponse(
                error_code=int(ErrorCode.INVALID_REQUEST), error_message="GroupId must be non-empty"
            )
        group = self.groups.get(req.group_id)
        if group is not None and (refused := refusal(group, req.member_id, req.instance_id, req.principal)):
            return _heartbeat_error(req, refused.code, refused.message)
        if group is None:
            # Invalid requests never create or reveal anything (seed 000 validates first).
            try:
                check_heartbeat(req)
            except RequestError as exc:
                return _heartbeat_error(req, exc.code, exc.message)
        if isinstance(group, ClassicGroup):
            if req.member_epoch != 0:
                return _not_found(req, f"group {req.group_id} is not a connect group")
            converted = self._upgrade(group, now_ms)
            if isinstance(converted, str):
                return _not_found(req, converted)
            group = converted
        elif group is None:
            if req.member_epoch == 0 and self._full():
                return _heartbeat_error(req, ErrorCode.COORDINATOR_NOT_AVAILABLE, self._full_message())
            if req.member_epoch != 0:
                return _heartbeat_error(
                    req, ErrorCode.UNKNOWN_MEMBER_ID, f"group {req.group_id} does not exist"
                )
            group = self._tracked(
                ConnectGroup(req.group_id, self.config, self.timers, self.view(req.group_id))
            )
            response = connect_steps.heartbeat(group, req, now_ms)
            if not group.members:
                group.drain_records()  # a failed first join leaves no group behind
                return response
            self.groups[req.group_id] = group
            self._after(req.group_id, now_ms)
            return response
        response = connect_steps.heartbeat(group, req, now_ms)
        if response.error_code == 0:
            connect_steps.heard_from(group, req.member_id, now_ms)  # its url's earlier incarnations
        self._after(req.group_id, now_ms)
        return response

    def steady_connect_heartbeat(self, req: HeartbeatRequest, now_ms: int) -> HeartbeatResponse | None:
        """:meth:`connect_heartbeat` of a heartbeat that only renews a stable member's session
        (``connect_steps.steady_heartbeat``), the short way; None for any other request, with
        nothing changed (:meth:`connect_heartbeat` answers it). The effects are the same: the member
        is heard from, and :meth:`_after` runs whenever it has anything to do (records queued, a
        downgrade pending); only then is the group marked changed, all :meth:`_gather` would find.
        The steady-heartbeat path calls it for every heartbeat of a stable worker."""
        group = self.groups.get(req.group_id) if req.group_id else None
        if not isinstance(group, ConnectGroup) or refusal(
            group, req.member_id, req.instance_id, req.principal
        ):
            return None
        response = connect_steps.steady_heartbeat(group, req, now_ms)
        if response is None:
            return None
        connect_steps.heard_from(group, req.member_id, now_ms)
        if not group.quiet or group.downgrade_pending:
            self._after(req.group_id, now_ms)
        return response

    def prepare_assignment(self, req: PrepareAssignmentRequest, now_ms: int) -> PrepareAssignmentResponse:
        return self._client_side(req, now_ms, connect_steps.prepare_assignment, PrepareAssignmentResponse)

    def install_assignment(self, req: InstallAssignmentRequest, now_ms: int) -> InstallAssignmentResponse:
        return self._client_side(req, now_ms, connect_steps.install_assignment, InstallAssignmentResponse)

    def _client_side(
        self, req: Any, now_ms: int, step: Callable[[ConnectGroup, Any, int], Any], response_type: type
    ) -> Any:
        """PrepareAssignment / InstallAssignment: only for existing connect groups (seed 000)."""
        group = self.connect_group(req.group_id) if req.group_id else None
        if group is None:
            code = ErrorCode.INVALID_REQUEST if not req.group_id else ErrorCode.GROUP_ID_NOT_FOUND
            return response_type(error_code=int(code), error_message=f"group {req.group_id!r}")
        if refused := refusal(group, req.member_id, None, req.principal):
            return response_type(error_code=int(refused.code), error_message=refused.message)
        response = step(group, req, now_ms)
        self._after(req.group_id, now_ms)
        return response

    def describe(self, group_id: str, now_ms: int = -1) -> DescribedGroup:
        """ConnectGroupDescribe of one group; ``now_ms`` (the caller's clock) is echoed in the answer
        so that its deadlines read as "in N seconds" against the bridge's clock."""
        group = self.connect_group(group_id)
        if group is None:
            return DescribedGroup(
                group_id=group_id, error_code=int(ErrorCode.GROUP_ID_NOT_FOUND), state="DEAD"
            )
        return connect_steps.describe_group(group, now_ms)

    def describe_any(self, group_id: str) -> DescribedGroup | ClassicDescribedGroup:
        """DescribeGroups: a classic group's own view, or a connect group's."""
        group = self.groups.get(group_id)
        if isinstance(group, ClassicGroup):
            return group.describe()
        return self.describe(group_id)

    def metrics_view(self, group_id: str) -> tuple[int, dict[tuple[str, str], int]] | None:
        """What the bridge's metrics show of one group: (group epoch, member count per (protocol,
        state)), or None when the group does not exist (any more).

        The same figures as :meth:`describe_any` gives (classic groups: generation, members counted
        as ("classic", "")), without building a description or passing over the members: the server
        refreshes a group's metrics after every change to it (issue 11.6).
        """
        group = self.groups.get(group_id)
        if group is None:
            return None
        if isinstance(group, ClassicGroup):
            # A classic group's members share its state: Kafka keeps no per-member state for them.
            state = (GroupType.CLASSIC.value, group.state.value)
            members = {state: len(group.members)} if group.members else {}
            return group.generation_id, members
        return group.group_epoch, dict(group.index.states)  # kept by the group's member index

    def list_groups(self) -> list[tuple[str, str, str, str]]:
        """(group id, protocol type, state, group type) of every group, for ListGroups."""
        out = []
        for gid, group in sorted(self.groups.items()):
            if isinstance(group, ClassicGroup):
                out.append((gid, group.protocol_type or "", group.state.value, GroupType.CLASSIC.value))
            else:
                out.append((gid, PROTOCOL_TYPE_CONNECT, group.state.value, GroupType.CONNECT.value))
        return out

    # ------------------------------------------------------------------ classic APIs
    def classic_join(self, req: capi.JoinGroupRequest, now_ms: int) -> capi.JoinGroupResponse | None:
        if not req.group_id:
            return capi.JoinGroupResponse(error_code=int(ErrorCode.INVALID_GROUP_ID), member_id=req.member_id)
        group = self.groups.get(req.group_id)
        if group is not None and (
            refused := refusal(group, req.member_id, req.group_instance_id, req.principal)
        ):
            return capi.JoinGroupResponse(
                error_code=int(refused.code), member_id=req.member_id, error_message=refused.message
            )
        # hand-back: a worker going upstream forgets (state.adoption.handback)
        unsynced = self._adoption.unsynced_round(req)
        if unsynced is not None:
            return unsynced
        policy = self.config.migration_policy
        if (
            isinstance(group, ConnectGroup)
            and not group.members
            and not (
                any(h.deadline_ms > now_ms for h in group.metadata.held)
                and (policy.allows_upgrade or policy.allows_downgrade)
            )
        ):
            # An empty connect group converts freely (Kafka's offline conversion), unless it holds
            # work for a departed member that may still run it: a classic leader would deal that
            # work out at once. The joiner is then served as a legacy member of the connect group,
            # which downgrades once the hold is over (ready_to_downgrade). An empty group keeps
            # its holds past their deadline (only a target computation drops them), so the
            # deadline decides: afterwards the group id is free, any protocol type included.
            if group.metadata.member_seq > 0:  # it had members: they forget first (classic_join)
                self._forget_rounds[req.group_id] = ForgetRounds(group.group_epoch + 1)
            connect_steps.tombstone_all(group)
            self._flush(group)
            group = None
        if group is None:
            if self._full():
                return capi.JoinGroupResponse(
                    error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
                    member_id=req.member_id,
                    error_message=self._full_message(),
                )
            group = self._new_classic(req.group_id, self._forget_rounds.get(req.group_id))
        if isinstance(group, ConnectGroup):
            if not policy.allows_upgrade and not policy.allows_downgrade:
                response: capi.JoinGroupResponse | None = capi.JoinGroupResponse(
                    error_code=int(ErrorCode.GROUP_ID_NOT_FOUND),
                    member_id=req.member_id,
                    error_message="migration policy disabled: classic members cannot join a connect group",
                )
            else:
                _heard_from(group, req.member_id, now_ms)
                response = legacy_steps.join(group, req, now_ms)
                if all(m.metadata.is_legacy for m in group.members.values()):
                    connect_steps.expect_downgrade(group)  # no new-protocol member left to wait for
        else:
            _heard_from(group, req.member_id, now_ms)
            response = classic_steps.join(group, req, now_ms)
            if group.persisted:
                self._forget_rounds.pop(req.group_id, None)  # the group carries them from now on
        self._after(req.group_id, now_ms)
        return response

    def classic_sync(self, req: capi.SyncGroupRequest, now_ms: int) -> capi.SyncGroupResponse | None:
        if req.api_version >= capi.SYNC_MANDATORY_PROTOCOL_MIN_VERSION and (
            req.protocol_type is None or req.protocol_name is None
        ):
            # KafkaApis.handleSyncGroupRequest (areMandatoryProtocolTypeAndNamePresent): from v5 both
            # are mandatory, checked before the group is looked up (found by the differential test
            # against Kafka, tests/test_classic_differential.py).
            return capi.SyncGroupResponse(error_code=int(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
        if not req.group_id:  # Kafka's GroupCoordinatorService, before any group lookup
            return capi.SyncGroupResponse(error_code=int(ErrorCode.INVALID_GROUP_ID))
        group = self.groups.get(req.group_id)
        if group is None:
            return capi.SyncGroupResponse(error_code=int(ErrorCode.UNKNOWN_MEMBER_ID))
        if refused := refusal(group, req.member_id, req.group_instance_id, req.principal):
            return capi.SyncGroupResponse(error_code=int(refused.code))
        if self._adoption.from_unsynced_round(req.group_id, req.member_id, req.generation_id):
            return capi.SyncGroupResponse(error_code=int(ErrorCode.UNKNOWN_MEMBER_ID))  # adoption.handback
        if req.assignments and isinstance(group, ClassicGroup) and self._adoption.releasing(req.group_id):
            req = replace(req, assignments=revoke_all(group, req.assignments))  # docs/adoption.md
        _heard_from(group, req.member_id, now_ms)
        response = (
            legacy_steps.sync(group, req, now_ms)
            if isinstance(group, ConnectGroup)
            else classic_steps.sync(group, req, now_ms)
        )
        self._after(req.group_id, now_ms)
        return response

    def classic_heartbeat(self, req: capi.HeartbeatRequest, now_ms: int) -> capi.HeartbeatResponse:
        if not req.group_id:  # Kafka's GroupCoordinatorService, before any group lookup
            return capi.HeartbeatResponse(error_code=int(ErrorCode.INVALID_GROUP_ID))
        group = self.groups.get(req.group_id)
        if group is None:
            return capi.HeartbeatResponse(error_code=int(ErrorCode.UNKNOWN_MEMBER_ID))
        if refused := refusal(group, req.member_id, req.group_instance_id, req.principal):
            return capi.HeartbeatResponse(error_code=int(refused.code))
        if self._adoption.from_unsynced_round(req.group_id, req.member_id, req.generation_id):
            return capi.HeartbeatResponse(error_code=int(ErrorCode.UNKNOWN_MEMBER_ID))  # adoption.handback
        _heard_from(group, req.member_id, now_ms)
        if isinstance(group, ConnectGroup):
            response = legacy_steps.heartbeat(group, req, now_ms)
        else:
            response = classic_steps.heartbeat(group, req, now_ms)
        self._after(req.group_id, now_ms)
        return response

    def steady_classic_heartbeat(
        self, req: capi.HeartbeatRequest, now_ms: int
    ) -> capi.HeartbeatResponse | None:
        """:meth:`classic_heartbeat` of a member of a Stable classic group at its generation
        (``classic_steps.steady_heartbeat``), the short way; None for any other request, with
        nothing changed (:meth:`classic_heartbeat` answers it). The effects are the same: the
        session renewed, the member heard from, and :meth:`_after` run whenever it has anything to
        do (records or parked answers queued, a rejoin due under ``releasing``; a Stable group with
        this member is neither dead nor empty); only then is the group marked changed."""
        group = self.groups.get(req.group_id) if req.group_id else None
        if (
            not isinstance(group, ClassicGroup)
            or refusal(group, req.member_id, req.group_instance_id, req.principal)
            or self._adoption.from_unsynced_round(req.group_id, req.member_id, req.generation_id)
        ):
            return None
        response = classic_steps.steady_heartbeat(group, req, now_ms)
        if response is None:
            return None
        group.heard_from(req.member_id)
        if not group.quiet or self._adoption.rejoin_pending(req.group_id):
            self._after(req.group_id, now_ms)
        return response

    def classic_leave(self, req: capi.LeaveGroupRequest, now_ms: int) -> capi.LeaveGroupResponse:
        if not req.group_id:  # Kafka's GroupCoordinatorService: the whole request, no member list
            return capi.LeaveGroupResponse(error_code=int(ErrorCode.INVALID_GROUP_ID))
        group = self.groups.get(req.group_id)
        if group is None:
            return capi.LeaveGroupResponse(
                members=[
                    (m.member_id, m.group_instance_id, int(ErrorCode.UNKNOWN_MEMBER_ID)) for m in req.members
                ]
            )
        named = ((m.member_id, m.group_instance_id) for m in req.members)
        refused = split_leaving(group, named, req.principal)
        if refused:
            return self._leave_own_members(group, req, refused, now_ms)
        if isinstance(group, ClassicGroup):
            held = self._leader_leaving(group, req, now_ms)
            if held is not None:
                return held
            self._adoption.hold_hand_back(group, removed_by_admin(group, req), now_ms)
        response = (
            legacy_steps.leave(group, req, now_ms)
            if isinstance(group, ConnectGroup)
            else classic_steps.leave(group, req, now_ms)
        )
        self._after(req.group_id, now_ms)
        return response

    def _leave_own_members(
        self, group: Group, req: capi.LeaveGroupRequest, refused: dict[int, Any], now_ms: int
    ) -> capi.LeaveGroupResponse:
        """A LeaveGroup batch naming members of other principals: those are answered as unknown
        members (``state.ownership``), the rest leave as usual; results keep the request's order."""
        own = tuple(m for i, m in enumerate(req.members) if i not in refused)
        answered = self.classic_leave(replace(req, members=own), now_ms) if own else None
        if answered is not None and answered.error_code:
            return answered  # the group's own error (a dead group) answers the whole batch
        done = iter(answered.members if answered is not None else ())
        results = [
            (m.member_id, m.group_instance_id, int(refused[i].code)) if i in refused else next(done)
            for i, m in enumerate(req.members)
        ]
        return capi.LeaveGroupResponse(members=results)

    def _leader_leaving(
        self, classic: ClassicGroup, req: capi.LeaveGroupRequest, now_ms: int
    ) -> capi.LeaveGroupResponse | None:
        """The classic group's Connect leader leaves a stable group: hold its work in a connect group.

        Connect's assignor holds a departed worker's work for ``scheduled.rebalance.max.delay.ms``
        only with the memory of the leader that assigned it; the next leader starts from nothing and
        deals the departed leader's work out at once (the rolling-restart case where the leader goes
        first, docs/known-issues.md). The bridge has that memory: it converts the group (as the
        first new worker would), removes the leader with its work held, and serves the remaining
        legacy workers as a connect group until the hold ends; then it converts back (policy
        ``bidirectional`` only, and only with a delay to honour). ``None`` = not this case.
        """
        if len(req.members) != 1:
            return None
        leaving = req.members[0]
        leader = classic.members.get(leaving.member_id) if leaving.member_id else None
        if leader is None or leader.group_instance_id != leaving.group_instance_id:
            return None
        converted = self._hold_for_leader(classic, leader.member_id, now_ms)
        if converted is None:
            return None
        response = legacy_steps.leave(converted, req, now_ms)
        self._after(req.group_id, now_ms)
        return response

    def _member_expiring(self, classic: ClassicGroup, key: TimerKey, now_ms: int) -> bool:
        """A classic timer (session, end of a join phase, sync deadline) is about to remove members
        that may still run work.

        A timer proves nothing about the process: a partitioned or stalled worker, or one waiting
        for a lost answer, still runs its work until it notices (docs/migration.md "Held work").
        Connect's leader holds lost work only when it is cooperative, remembers the assignment
        (which a leader change, a downgrade or a generation it did not complete wipes out) and no
        earlier delay is about to run out, and it was still seen dealing such work out at once in
        adversarial drills however those conditions were read (10003149, 20022560, 23072045). So
        the bridge converts the group and removes those members in the connect group with their
        work held for the delay, at least the zombie grace, then converts back. ``False`` = not
        this case (or the policy forbids it); the classic group handles the timer.

        While ``releasing`` no generation of this group deals work (``state.adoption.handback``): the classic
        group removes the members, and the hand-back waits out their hold instead."""
        if self._adoption.releasing(classic.group_id):
            self._adoption.hold_hand_back(classic, classic_steps.removed_by(classic, key), now_ms)
            return False
        leaving = [m for m in classic_steps.removed_by(classic, key) if may_run_any(classic, m)]
        if not leaving:
            return False
        eager = classic.protocol_name == EAGER_PROTOCOL  # read before the conversion clears it
        converted = self._hold_in_connect_group(classic, now_ms)
        if converted is None:
            return False
        for m in leaving:
            expired = converted.members.get(m.member_id)
            if expired is not None:
                hold_ms = timer_removal_hold_ms(m.session_timeout_ms, now_ms, m.waits_elsewhere_until_ms)
                connect_steps.remove_member(converted, expired, now_ms, min_hold_ms=hold_ms)
        # A new target at once, as every other removal brings: the members rejoin at their next
        # heartbeat (Kafka's rebalance after an expiry) and their assignments carry the time left on
        # the hold, so they come back for the released work the moment it ends. Not under eager:
        # a v0 assignment has no delay to carry, and an eager rejoin restarts everything for nothing.
        if not eager:
            connect_steps.maybe_update_target(converted, now_ms)
        self._after(classic.group_id, now_ms)
        return True

    def _hold_for_leader(self, classic: ClassicGroup, member_id: str, now_ms: int) -> ConnectGroup | None:
        """The leader ``member_id`` leaves a cooperative group whose delay there is to honour."""
        leader = classic.members.get(member_id)
        if (
            self.config.scheduled_rebalance_max_delay_ms <= 0
            or self._adoption.releasing(classic.group_id)
            or leader is None
            or member_id != classic.leader_id
            or classic.protocol_name == EAGER_PROTOCOL
            or not may_run_any(classic, leader)
        ):
            return None
        return self._hold_in_connect_group(classic, now_ms)

    def _hold_in_connect_group(self, classic: ClassicGroup, now_ms: int) -> ConnectGroup | None:
        """Convert ``classic`` to a connect group that downgrades once nothing is held (policy
        ``bidirectional`` only; in any phase of a rebalance: the conversion keeps what unsynced
        members may still run, as at upgrade). ``None`` = not possible here."""
        policy = self.config.migration_policy
        if not (policy.allows_upgrade and policy.allows_downgrade):
            return None
        # The last member too: the emptied connect group keeps the hold, and a worker joining it
        # meanwhile is served as a legacy member until the hold ends (adversarial drill 20052438).
        if (
            not classic.members
            or classic.state in (ClassicGroupState.EMPTY, ClassicGroupState.DEAD)
            or classic.protocol_type != PROTOCOL_TYPE_CONNECT
        ):
            return None
        converted = self._upgrade(classic, now_ms)
        if isinstance(converted, str):
            return None
        connect_steps.expect_downgrade(converted)
        return converted

    # ------------------------------------------------------------------ adoption and hand-back
    # docs/adoption.md; each is the method of the same name of ``state.adoption.steps.OwnershipPhases``,
    # which documents it and says what it raises (``AdoptionError``, ``OwnershipError``).
    def adopt(
        self, gen: UpstreamGeneration, now_ms: int, principals: dict[str, str] | None = None
    ) -> list[Record]:
        """Continue the upstream generation ``gen`` as the bridge's own classic group."""
        return self._adoption.adopt(gen, now_ms, principals)

    def adopt_emptied(self, group_id: str, generation_id: int, now_ms: int) -> Record:
        """Take over a relayed group whose upstream group has emptied (only ``adopted`` written)."""
        return self._adoption.adopt_emptied(group_id, generation_id, now_ms)

    def change_ownership(self, group_id: str, state: OwnershipState, generation: int, now_ms: int) -> Record:
        """Record a phase change other than adoption (relaying, releasing, released)."""
        return self._adoption.change_ownership(group_id, state, generation, now_ms)

    def start_release(self, group_id: str, now_ms: int) -> Record:
        """Write ``releasing`` for an adopted group and start sending its members away."""
        return self._adoption.start_release(group_id, now_ms)

    def release_member(self, group_id: str, member_id: str, now_ms: int) -> bool:
        """Hand-back: remove one member of a ``releasing`` group; False if it is not a member."""
        return self._adoption.release_member(group_id, member_id, now_ms)

    def release_returned(
        self, group_id: str, protocols: Protocols, instance_id: str | None, now_ms: int
    ) -> list[str]:
        """Hand-back: remove the earlier incarnations of a stopped worker that joins again."""
        return self._adoption.release_returned(group_id, protocols, instance_id, now_ms)

    def hand_back_hold_until(self, group_id: str) -> int:
        """The time before which a ``releasing`` group's hand-back is not finished (-1: none)."""
        return self._adoption.hand_back_hold_until(group_id)

    def unsynced_round_due(self, req: capi.JoinGroupRequest) -> bool:
        """Whether a JoinGroup of a ``releasing`` group is answered here with an unsynced round."""
        return self._adoption.unsynced_round_due(req)

    def unsynced_round(self, req: capi.JoinGroupRequest) -> capi.JoinGroupResponse | None:
        """The unsynced leader round that answers ``req``, noted as given; ``None`` when none is due."""
        return self._adoption.unsynced_round(req)

    def from_unsynced_round(self, group_id: str, member_id: str, generation_id: int) -> bool:
        """Whether a SyncGroup or Heartbeat comes from an unsynced leader round answered here."""
        return self._adoption.from_unsynced_round(group_id, member_id, generation_id)

    def finish_release(self, group_id: str, now_ms: int) -> bool:
        """Hand-back: tombstone the emptied ``releasing`` group and write ``released`` once its
        holds have ended; False before."""
        return self._adoption.finish_release(group_id, now_ms)

    # ------------------------------------------------------------------ effects
    def _gather(self) -> None:
        """Move the effects of the groups changed since the last call into the coordinator's own
        queues: their records, their released parked answers, and whether their classic state
        changed. Only the changed groups are visited (``state.result.Touched``)."""
        touched = self._touched
        if not touched:
            return
        groups, states = self.groups, self._classic_states
        for gid in touched:
            group = groups.get(gid)
            if group is None:
                if states.pop(gid, None) is not None:
                    self._classic_changed.add(gid)  # deleted
                continue
            self._records.extend(group.drain_records())
            if isinstance(group, ClassicGroup):
                self._responses.extend(group.drain_responses())
                if states.get(gid) is not group.state:
                    states[gid] = group.state
                    self._classic_changed.add(gid)
            elif states.pop(gid, None) is not None:
                self._classic_changed.add(gid)  # converted to a connect group
        touched.clear()

    def has_effects(self) -> bool:
        """Whether the steps since the last result left records, released parked answers or changed
        classic groups: a result built now would carry more than its response and the next
        deadline. The steady-heartbeat path asks, and builds no result when nothing happened."""
        self._gather()
        return bool(self._records or self._responses or self._classic_changed)

    def result(self, response: R = None) -> CoordinatorResult[R]:  # type: ignore[assignment]
        """The effects of the steps since the last result, with ``response``: what a caller must
        make durable, the parked answers it must deliver, and when the next timer is due."""
        self._gather()
        records, self._records = self._records, []
        released, self._responses = self._responses, []
        changed, self._classic_changed = self._classic_changed, set()
        return CoordinatorResult(response, records, released, frozenset(changed), self.timers.next_deadline())

    def drain_responses(self) -> list[tuple[object, object]]:
        """Parked JoinGroup/SyncGroup responses released since the last call: (token, response)."""
        self._gather()
        out, self._responses = self._responses, []
        return out

    # ------------------------------------------------------------------ time
    def next_deadline(self) -> int | None:
        return self.timers.next_deadline()

    def advance(self, now_ms: int) -> None:
        """Fire every timer due at ``now_ms``, one at a time (a handler may cancel the next one)."""
        while (key := self.timers.pop_due(now_ms)) is not None:
            if key.kind is TimerKind.EMPTY:
                self._expire_empty(key.group_id, now_ms)
                continue
            group = self.groups.get(key.group_id)
            if group is None:
                continue
            if isinstance(group, ClassicGroup) and self._member_expiring(group, key, now_ms):
                continue
            if isinstance(group, ConnectGroup) != key.kind.is_connect:
                continue
            if isinstance(group, ConnectGroup):
                connect_steps.on_timer(group, key, now_ms)
            else:
                classic_steps.on_timer(group, key, now_ms)
            self._after(key.group_id, now_ms)

    # ------------------------------------------------------------------ records
    def drain_records(self) -> list[Record]:
        """Records written since the last call (or result), to be made durable."""
        self._gather()
        out, self._records = self._records, []
        return out

    def replay(self, records: list[Record], now_ms: int) -> set[str]:
        """Load state from records, then re-arm the timers of the groups they touched from
        ``now_ms``; the touched group ids.

        A group's type is decided record by record, so a full (uncompacted) log with conversions in
        both directions loads the same as its compacted form. Groups the records do not name are
        left alone, so a bridge that takes over one partition of the state topic (several bridges,
        docs/high-availability.md) loads its groups next to those it already coordinates; every
        loaded member gets a fresh session timeout, as Kafka's coordinator gives after loading.
        """
        touched: set[str] = set()
        for record in records:
            touched.add(record.group_id)
            self._replay_one(record)
        self._touched.update(dict.fromkeys(sorted(touched)))
        for gid, group in [(gid, g) for gid, g in self.groups.items() if gid in touched]:
            if isinstance(group, ClassicGroup) and group.state is ClassicGroupState.DEAD:
                del self.groups[gid]
                continue
            if isinstance(group, ConnectGroup):
                group.set_config_view(self.view(gid))
            group.drain_records()
            if isinstance(group, ClassicGroup):
                classic_steps.rebuild_after_load(group, now_ms, reloaded=True)
            else:
                connect_steps.rebuild_after_load(group, now_ms)
        self._adoption.drop_unowned(now_ms, touched)
        for gid, group in [(gid, g) for gid, g in self.groups.items() if gid in touched]:
            if self._adoption.releasing(gid) and isinstance(group, ClassicGroup):
                self._adoption.rebalance_to_release(group, now_ms)
        for gid in sorted(touched):
            self._arm_empty(gid, now_ms)  # an empty group loaded goes a full expiry from now
        return touched

    def _replay_one(self, record: Record) -> None:
        gid = record.group_id
        if record.type is RecordType.CONFIG:
            if record.value is None:
                self.views.pop(gid, None)
            else:
                self.views[gid] = record.value  # type: ignore[assignment]
            return
        if record.type is RecordType.GROUP_OWNERSHIP:
            self.ownership.apply(record)
            return
        group = self.groups.get(gid)
        if record.type is RecordType.CLASSIC_GROUP:
            if record.value is None and not isinstance(group, ClassicGroup):
                return
            if not isinstance(group, ClassicGroup):
                group = self._new_classic(gid)
        elif not isinstance(group, ConnectGroup):
            if record.value is None:
                return
            group = self._new_connect(gid)
        group.apply(record)
        if record.type is RecordType.GROUP_METADATA and record.value is None:
            del self.groups[gid]  # the group is deleted (``ConnectGroup.apply`` of its tombstone)

    def unload(self, group_ids: set[str]) -> None:
        """Forget ``group_ids`` without writing anything: another bridge coordinates them now (their
        partition of the state topic was revoked, or this bridge's writes to it were fenced).

        Like Kafka's coordinator when it unloads a partition, every JoinGroup/SyncGroup parked in
        those groups is answered NOT_COORDINATOR (collect them with ``drain_responses``), so the
        workers look for the new coordinator at once; their timers stop firing here.
        """
        for gid in group_ids:
            self._touched[gid] = None
            group = self.groups.pop(gid, None)
            if isinstance(group, ClassicGroup):
                group.release_parked(ErrorCode.NOT_COORDINATOR)
                self._responses.extend(group.drain_responses())
            if group is not None:
                group.drain_records()  # nothing of a group given up may reach the store
            self.views.pop(gid, None)
            self.ownership.forget(gid)
        for key in self.timers.keys():
            if key.group_id in group_ids:
                self.timers.cancel(key)
        self._empty_armed -= group_ids

    def snapshot(self) -> dict[str, object]:
        return {
            "views": dict(sorted(self.views.items())),
            "ownership": self.ownership.snapshot(),
            "groups": {gid: (type(g).__name__, g.snapshot()) for gid, g in sorted(self.groups.items())},
        }


def _heartbeat_error(req: HeartbeatRequest, code: ErrorCode, message: str) -> HeartbeatResponse:
    """A ConnectGroupHeartbeat rejected before any group sees it (the member's own id and epoch)."""
    return HeartbeatResponse(
        error_code=int(code), error_message=message, member_id=req.member_id, member_epoch=req.member_epoch
    )


def _not_found(req: HeartbeatRequest, message: str) -> HeartbeatResponse:
    return _heartbeat_error(req, ErrorCode.GROUP_ID_NOT_FOUND, message)


__all__ = ["GroupCoordinator"]


def _heard_from(group: ClassicGroup | ConnectGroup, member_id: str, now_ms: int) -> None:
    """A request of ``member_id`` reached this coordinator: a Java client talks to one coordinator
    at a time and fails what it had in flight when it moves, so the member no longer waits on a
    JoinGroup parked at a previous one (``ClassicMember.waits_elsewhere_until_ms``, set at a load;
    the legacy members of a connect group keep theirs in the group, ``heard_from``). A timer that
    removes it later holds its work as anyone's, not until that JoinGroup could have timed out
    (adversarial drill 95000285001369: held 64.5 s past a crash with a 15 s delay)."""
    if isinstance(group, ConnectGroup):
        connect_steps.heard_from(group, member_id, now_ms)
    else:
        group.heard_from(member_id)
