"""Client-side assignment of a connect group: COMPUTE_ASSIGNMENT, PrepareAssignment, InstallAssignment.

When every member advertises a common client assignor, one member computes the target (seed 000
"Assignor Selection", "Worker Selection"): it is chosen by version range, told with
COMPUTE_ASSIGNMENT on its next heartbeat, reads the group through PrepareAssignment, and installs a
target that is validated against exactly what it was shown. One computation is in flight at a time;
after the chosen member's rebalance timeout another member is chosen. None of this is persisted: a
restarted coordinator simply chooses again.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.codecs.ids import ConnectorTaskId
from connect_bridge.state.api import (
    HeartbeatResponse,
    InstallAssignmentRequest,
    InstallAssignmentResponse,
    PrepareAssignmentRequest,
    PrepareAssignmentResponse,
    PreparedMember,
)
from connect_bridge.state.errors import RequestError
from connect_bridge.state.model import EMPTY, Items, Member

if TYPE_CHECKING:
    from connect_bridge.state.connect_group import ConnectGroup


class ClientSideAssignment:
    def __init__(self, group: ConnectGroup) -> None:
        self.group = group
        self.member: str | None = None
        """The member chosen to compute the next target."""
        self.notified = False
        """Whether it has been told (COMPUTE_ASSIGNMENT); its rebalance timeout runs from then."""
        self.snapshot: tuple[int, frozenset[str], Items] | None = None
        """(group epoch, members, configured work) shown by PrepareAssignment; Install is checked on it."""

    def forget(self, member_id: str) -> None:
        """The member left or was replaced: if it was computing, nobody is now."""
        if self.member == member_id:
            self.member = None
            self.notified = False

    def on_timeout(self) -> None:
        if self.member is not None and self.notified:
            self.choose(exclude=self.member)

    def signal(self, member: Member, resp: HeartbeatResponse, now_ms: int) -> None:
        """COMPUTE_ASSIGNMENT on the chosen member's heartbeat while a new target is due."""
        g = self.group
        if self.member == member.member_id and g.group_epoch > g.assignment_epoch:
            resp.error_code = int(ErrorCode.COMPUTE_ASSIGNMENT)
            resp.error_message = "compute the new target assignment of the group"
            if not self.notified:
                self.notified = True
                g.timers.schedule(("compute", g.group_id), now_ms + member.metadata.rebalance_timeout_ms)

    def choose(self, exclude: str | None = None) -> None:
        """Pick the member whose client assignor version range covers everyone else's (seed 000)."""
        g = self.group
        name = g.assignor_name()
        ranges: dict[str, tuple[int, int]] = {}
        for mid, m in g.members.items():
            for a in m.metadata.client_assignors:
                if a.name == name:
                    ranges[mid] = (a.minimum_version, a.maximum_version)
        if not ranges:
            self.member = None
            return
        lo, hi = min(r[0] for r in ranges.values()), max(r[1] for r in ranges.values())
        covering = [mid for mid, r in ranges.items() if r[0] <= lo and r[1] >= hi]
        candidates = covering or list(ranges)
        if exclude is not None and len(candidates) > 1:
            candidates = [c for c in candidates if c != exclude]
        leader = g.metadata.leader_id
        self.member = leader if leader in candidates else min(candidates)
        self.notified = False
        self.snapshot = None

    def _check_chosen(self, member_id: str, member_epoch: int) -> Member:
        g = self.group
        member = g.members.get(member_id)
        if member is None:
            raise RequestError(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id} is not in the group")
        if member.current.member_epoch != member_epoch:
            raise RequestError(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"member epoch {member_epoch} does not match {member.current.member_epoch}",
            )
        if self.member != member_id or not self.notified:
            raise RequestError(
                ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id} is not chosen to compute the assignment"
            )
        return member

    def prepare(self, req: PrepareAssignmentRequest, now_ms: int) -> PrepareAssignmentResponse:
        g = self.group
        try:
            if not req.member_id or req.member_epoch < 0:
                raise RequestError(
                    ErrorCode.INVALID_REQUEST, "MemberId must be non-empty and MemberEpoch >= 0"
                )
            self._check_chosen(req.member_id, req.member_epoch)
        except RequestError as exc:
            return PrepareAssignmentResponse(error_code=int(exc.code), error_message=exc.message)
        spec = g._assignment_spec(now_ms)
        self.snapshot = (g.group_epoch, frozenset(g.members), spec.configured)
        name = g.assignor_name()
        members = []
        for mid in sorted(g.members):
            m = g.members[mid]
            chosen = next((a for a in m.metadata.client_assignors if a.name == name), None)
            members.append(
                PreparedMember(
                    mid,
                    m.current.member_epoch,
                    m.metadata.instance_id,
                    m.metadata.url,
                    m.metadata.config_offset,
                    chosen,
                    g.target.get(mid, EMPTY) | spec.returned.get(mid, EMPTY),
                )
            )
        connectors = {c.connector: 0 for c in spec.configured if c.is_connector}
        for item in spec.configured:
            if not item.is_connector:
                connectors[item.connector] = max(connectors.get(item.connector, 0), item.task + 1)
        return PrepareAssignmentResponse(
            group_epoch=g.group_epoch,
            assignor_name=name,
            config_offset=g.assignment_config_offset(),
            connectors=connectors,
            members=tuple(members),
        )

    def install(self, req: InstallAssignmentRequest, now_ms: int) -> InstallAssignmentResponse:
        g = self.group
        try:
            if not req.member_id or req.member_epoch < 0:
                raise RequestError(
                    ErrorCode.INVALID_REQUEST, "MemberId must be non-empty and MemberEpoch >= 0"
                )
            self._check_chosen(req.member_id, req.member_epoch)
            snapshot = self.snapshot
            if snapshot is None or snapshot[0] != req.group_epoch:
                raise RequestError(
                    ErrorCode.INVALID_ASSIGNMENT,
                    f"group epoch {req.group_epoch} is not the epoch the assignment was prepared for",
                )
            epoch, members, configured = snapshot
            if req.error == 0:
                _validate_assignment(req.members, members, configured)
                target = {mid: items for mid, items in req.members.items() if mid in g.members}
            else:
                target = {mid: items for mid, items in g.target.items() if mid in g.members}
        except RequestError as exc:
            return InstallAssignmentResponse(error_code=int(exc.code), error_message=exc.message)
        for mid in g.members:
            target.setdefault(mid, EMPTY)
        g._install_target(epoch, target, req.error)
        self.member = None
        self.notified = False
        self.snapshot = None
        g.timers.cancel(("compute", g.group_id))
        g.maybe_update_target(now_ms)
        return InstallAssignmentResponse()


def _validate_assignment(proposed: dict[str, Items], members: Iterable[str], configured: Items) -> None:
    members = set(members)
    unknown = sorted(set(proposed) - members)
    if unknown:
        raise RequestError(ErrorCode.INVALID_ASSIGNMENT, f"unknown members in assignment: {unknown}")
    seen: set[ConnectorTaskId] = set()
    for mid in sorted(proposed):
        items = proposed[mid]
        twice = seen & items
        if twice:
            raise RequestError(
                ErrorCode.INVALID_ASSIGNMENT, f"{sorted(map(str, twice))[:5]} assigned more than once"
            )
        seen |= items
    extra = seen - configured
    if extra:
        raise RequestError(
            ErrorCode.INVALID_ASSIGNMENT, f"{sorted(map(str, extra))[:5]} are not configured work"
        )
    missing = configured - seen
    if missing:
        raise RequestError(ErrorCode.INVALID_ASSIGNMENT, f"{sorted(map(str, missing))[:5]} are not assigned")
