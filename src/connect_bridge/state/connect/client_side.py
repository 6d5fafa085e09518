"""Client-side assignment of a connect group: COMPUTE_ASSIGNMENT, PrepareAssignment, InstallAssignment.

When every member advertises a common client assignor, one member computes the target (seed 000
"Assignor Selection", "Worker Selection"): it is chosen by version range, told with
COMPUTE_ASSIGNMENT on its next heartbeat, reads the group through PrepareAssignment, and installs a
target that is validated against exactly what it was shown.

The choice follows the group: whenever the group epoch moves (a member joins, leaves or changes its
assignors) or the chosen member leaves, even temporarily, it is made again by the seed's rule. A
member already told to compute keeps the job while its range still covers everyone (one computation
at a time); otherwise the job moves at once and the computation it had prepared is superseded: its
install is answered INVALID_ASSIGNMENT. After the chosen member's rebalance timeout another member is
chosen. A group in which no member's range covers every other member's cannot compute at all: seed
000's fatal error, UNSUPPORTED_ASSIGNOR (see :meth:`ClientSideAssignment.check_heartbeat`).

Nothing here is persisted: a restarted coordinator simply chooses again. The assignor's output (the
target, its error and per-member metadata) is: the group installs what :meth:`ClientSideAssignment
.validate_install` accepts, by records. The steps take the group as an argument and only read it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.codecs.ids import ConnectorTaskId
from connect_bridge.state.api import (
    HeartbeatRequest,
    HeartbeatResponse,
    InstallAssignmentRequest,
    PrepareAssignmentResponse,
    PreparedMember,
)
from connect_bridge.state.assignors import AssignmentSpec
from connect_bridge.state.connect.view import ConnectGroupView
from connect_bridge.state.errors import RequestError
from connect_bridge.state.model import EMPTY, AssignedMetadata, ClientAssignor, Items, Member
from connect_bridge.state.timers import TimerKey, Timers

_JOINING = "(joining member)"
"""How a member joining without a member id is named in an UNSUPPORTED_ASSIGNOR message."""


def common_client_assignor(assignors: Mapping[str, tuple[ClientAssignor, ...]]) -> str | None:
    """Seed 000 "Assignor Selection": the first assignor, in the preference order of the lowest member
    id, that every member supports; None if some member has no client assignor or none is shared."""
    names: set[str] | None = None
    first: tuple[ClientAssignor, ...] = ()
    for mid in sorted(assignors):
        offered = assignors[mid]
        if not offered:
            return None
        if names is None:
            names, first = {a.name for a in offered}, offered
        else:
            names &= {a.name for a in offered}
    for a in first:
        if names and a.name in names:
            return a.name
    return None


def range_conflict(
    assignors: Mapping[str, tuple[ClientAssignor, ...]], member_id: str, offered: Iterable[ClientAssignor]
) -> tuple[ClientAssignor, str, ClientAssignor] | None:
    """The first assignor in ``offered`` whose version range does not overlap another member's range
    of the same name: (offered assignor, other member id, other member's assignor), or None.

    "First" is the order of a nested scan (offered assignors in order; for the first that conflicts,
    the other members in ``assignors`` order and their assignors in order), but the work is linear in
    what the members advertise: per name, the lowest maximum and highest minimum version of the
    other members say whether an offered range overlaps all of them, and only the one offered
    assignor known to conflict is looked up member by member. ``member_id`` (the member itself) is
    skipped. Comparing every pair instead stalled the event loop for 23 s on two joins carrying
    30,000 assignors each (issue 11.6).
    """
    offered = tuple(offered)
    wanted = {a.name for a in offered}
    lowest_max: dict[str, int] = {}
    highest_min: dict[str, int] = {}
    for mid, advertised in assignors.items():
        if mid == member_id:
            continue
        for other in advertised:
            name = other.name
            if name not in wanted:
                continue
            if name not in lowest_max:
                lowest_max[name], highest_min[name] = other.maximum_version, other.minimum_version
            else:
                lowest_max[name] = min(lowest_max[name], other.maximum_version)
                highest_min[name] = max(highest_min[name], other.minimum_version)
    for a in offered:
        lowest = lowest_max.get(a.name)
        if lowest is None or (lowest >= a.minimum_version and highest_min[a.name] <= a.maximum_version):
            continue
        for mid, advertised in assignors.items():
            if mid == member_id:
                continue
            for other in advertised:
                if other.name == a.name and (
                    other.maximum_version < a.minimum_version or a.maximum_version < other.minimum_version
                ):
                    return a, mid, other
    return None


def check_client_ranges(
    assignors: Mapping[str, tuple[ClientAssignor, ...]], member_id: str, offered: Iterable[ClientAssignor]
) -> None:
    """UNSUPPORTED_ASSIGNOR when an offered assignor's range misses another member's of the same name."""
    conflict = range_conflict(assignors, member_id, offered)
    if conflict is not None:
        a, mid, other = conflict
        raise RequestError(
            ErrorCode.UNSUPPORTED_ASSIGNOR,
            f"assignor {a.name} versions [{a.minimum_version}-{a.maximum_version}] do not "
            f"overlap member {mid}'s [{other.minimum_version}-{other.maximum_version}]",
        )


def _ranges(assignors: Mapping[str, tuple[ClientAssignor, ...]], name: str) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for mid, offered in assignors.items():
        a = next((a for a in offered if a.name == name), None)
        if a is not None:
            out[mid] = (a.minimum_version, a.maximum_version)
    return out


def _covering(ranges: Mapping[str, tuple[int, int]]) -> list[str]:
    """Members whose version range covers every member's (A [1-5], B [3-4], C [2-4] -> [A])."""
    if not ranges:
        return []
    lo, hi = min(r[0] for r in ranges.values()), max(r[1] for r in ranges.values())
    return sorted(mid for mid, r in ranges.items() if r[0] <= lo and r[1] >= hi)


def no_cover_problem(assignors: Mapping[str, tuple[ClientAssignor, ...]]) -> str | None:
    """Why nobody can compute for this membership (the message of UNSUPPORTED_ASSIGNOR), or None."""
    name = common_client_assignor(assignors)
    if name is None:
        return None  # the server-side assignor computes
    ranges = _ranges(assignors, name)
    if _covering(ranges):
        return None
    shown = ", ".join(f"{mid} [{lo}-{hi}]" for mid, (lo, hi) in sorted(ranges.items())[:10])
    more = f" and {len(ranges) - 10} more" if len(ranges) > 10 else ""
    return (
        f"no member's {name} version range covers every member's, so nobody can compute the "
        f"assignment: {shown}{more}"
    )


class ClientSideAssignment:
    """Who computes the next client-side target, and what it was shown (soft state, no records).

    Its steps take the group as an argument (:class:`ConnectGroupView`) and only read it: the group
    itself installs what :meth:`validate_install` accepts. The only effect of its own is the compute
    timer.
    """

    def __init__(self, group_id: str, timers: Timers) -> None:
        self._compute_timer = TimerKey.compute(group_id)
        self._timers = timers
        self.member: str | None = None
        """The member chosen to compute the next target."""
        self.notified = False
        """Whether it has been told (COMPUTE_ASSIGNMENT); its rebalance timeout runs from then."""
        self.snapshot: tuple[int, frozenset[str], Items] | None = None
        """(group epoch, members, configured work) shown by PrepareAssignment; Install is checked on it."""
        self.superseded: tuple[str, int] | None = None
        """(member, group epoch) of a prepared computation taken away from its member: its install is
        stale (INVALID_ASSIGNMENT) rather than from a member never chosen (UNKNOWN_MEMBER_ID)."""
        self.passed_over: str | None = None
        """The member whose computation timed out: not chosen again while another member qualifies,
        until a target is installed."""
        self._evaluated: tuple[int, int] | None = None
        """(group epoch, member count) the choice was last made for: nothing else changes it."""
        self._problem: tuple[tuple[int, int], str | None] | None = None
        """:func:`no_cover_problem` of the group as it is, cached by (group epoch, member count)."""

    # ------------------------------------------------------------------ choosing
    def _drop(self) -> None:
        """Take the job away from the chosen member; a computation it prepared becomes stale."""
        if self.member is not None and self.snapshot is not None:
            self.superseded = (self.member, self.snapshot[0])
        self.member = None
        self.notified = False
        self.snapshot = None
        self._timers.cancel(self._compute_timer)

    def forget(self, member_id: str) -> bool:
        """The member left (possibly temporarily) or was replaced: if it was chosen, choose again.

        Returns whether it was the chosen one (the caller then lets ``maybe_update_target`` choose).
        """
        if self.passed_over == member_id:
            self.passed_over = None
        if self.member != member_id:
            return False
        self._drop()
        self._evaluated = None
        return True

    def use_server_side(self) -> None:
        """The group no longer uses a client-side assignor: nobody computes."""
        if self.member is not None:
            self._drop()
        self._evaluated = None

    def installed(self) -> None:
        """A target was installed: the computation is done, nobody is passed over any more."""
        self._drop()
        self.superseded = None
        self.passed_over = None
        self._evaluated = None

    def on_timeout(self, group: ConnectGroupView) -> None:
        if self.member is not None and self.notified:
            self.passed_over = self.member
            self._drop()
            self._choose(group)

    def reevaluate(self, group: ConnectGroupView) -> None:
        """Called while a client-side target is due: redo the choice if the group changed since."""
        if self._evaluated != _key(group):
            self._choose(group)

    def _choose(self, group: ConnectGroupView) -> None:
        """Seed 000 "Worker Selection": a member whose version range covers everyone else's; among
        them the leader if it qualifies, else the lowest id. Members away after a -2 leave cannot
        compute. A member already told keeps the job while it still qualifies."""
        self._evaluated = _key(group)
        assignors = {mid: m.metadata.client_assignors for mid, m in group.members.items()}
        name = common_client_assignor(assignors)
        covering = _covering(_ranges(assignors, name)) if name is not None else []
        eligible = [mid for mid in covering if not group.members[mid].current.left_temporarily]
        if self.member in eligible and self.notified:
            return
        candidates = [mid for mid in eligible if mid != self.passed_over] or eligible
        leader = group.metadata.leader_id
        chosen: str | None = None
        if candidates:
            chosen = leader if leader in candidates else candidates[0]  # sorted: the lowest id
        if chosen != self.member:
            self._drop()
            self.member = chosen

    def check_heartbeat(self, group: ConnectGroupView, req: HeartbeatRequest) -> None:
        """UNSUPPORTED_ASSIGNOR for a heartbeat after which no member could compute for everyone.

        Seed 000 makes a group without such a member a FATAL error. A join or an assignor change that
        would create one is refused like any invalid request (the group is untouched); in a group that
        got there by losing its covering member, every heartbeat is refused the same way, except one
        that brings a covering range back. Leaving is always allowed.
        """
        if req.member_epoch < 0:
            return
        member = group.members.get(req.member_id) if req.member_id else None
        if member is None and req.member_epoch != 0:
            return  # UNKNOWN_MEMBER_ID, answered later
        if _server_side_after(group, req, member):
            return  # someone advertises no client assignor: the server-side assignor computes
        if member is not None and req.client_assignors is None:
            key = _key(group)
            if self._problem is None or self._problem[0] != key:
                current = {mid: m.metadata.client_assignors for mid, m in group.members.items()}
                self._problem = (key, no_cover_problem(current))
            problem = self._problem[1]
        else:
            assignors = {
                mid: m.metadata.client_assignors
                for mid, m in group.members.items()
                # A static member coming back replaces its old member.
                if not (req.instance_id and m.metadata.instance_id == req.instance_id)
            }
            offered = req.client_assignors
            if offered is None:
                offered = member.metadata.client_assignors if member is not None else ()
            assignors[req.member_id or _JOINING] = tuple(offered)
            problem = no_cover_problem(assignors)
        if problem is not None:
            raise RequestError(ErrorCode.UNSUPPORTED_ASSIGNOR, problem)

    def signal(self, group: ConnectGroupView, member: Member, resp: HeartbeatResponse, now_ms: int) -> None:
        """COMPUTE_ASSIGNMENT on the chosen member's heartbeat while a new target is due."""
        if self.member == member.member_id and group.group_epoch > group.assignment_epoch:
            resp.error_code = int(ErrorCode.COMPUTE_ASSIGNMENT)
            resp.error_message = "compute the new target assignment of the group"
            if not self.notified:
                self.notified = True
                self._timers.schedule(self._compute_timer, now_ms + member.metadata.rebalance_timeout_ms)

    def check_chosen(
        self, group: ConnectGroupView, member_id: str, member_epoch: int, group_epoch: int | None = None
    ) -> Member:
        """Seed 000 steps 1-4 of PrepareAssignment/InstallAssignment. ``group_epoch``: an install's."""
        if not member_id or member_epoch < 0:
            raise RequestError(ErrorCode.INVALID_REQUEST, "MemberId must be non-empty and MemberEpoch >= 0")
        member = group.members.get(member_id)
        if member is None:
            raise RequestError(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id} is not in the group")
        if member.current.member_epoch != member_epoch:
            raise RequestError(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"member epoch {member_epoch} does not match {member.current.member_epoch}",
            )
        if self.member != member_id or not self.notified:
            if group_epoch is not None and self.superseded == (member_id, group_epoch):
                raise RequestError(
                    ErrorCode.INVALID_ASSIGNMENT,
                    f"the assignment prepared at group epoch {group_epoch} is stale: the group changed "
                    "and the computation was handed over",
                )
            raise RequestError(
                ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id} is not chosen to compute the assignment"
            )
        return member

    # ------------------------------------------------------------------ Prepare / Install
    def prepared(self, group: ConnectGroupView, spec: AssignmentSpec) -> PrepareAssignmentResponse:
        """What PrepareAssignment shows the chosen member (``spec``: the group's assignor input,
        held work resolved); Install is later checked against exactly this."""
        self.snapshot = (group.group_epoch, frozenset(group.members), spec.configured)
        name = group.assignor_name()
        members = []
        for mid in sorted(group.members):
            m = group.members[mid]
            chosen = next((a for a in m.metadata.client_assignors if a.name == name), None)
            members.append(
                PreparedMember(
                    mid,
                    m.current.member_epoch,
                    m.metadata.instance_id,
                    m.metadata.url,
                    m.metadata.config_offset,
                    chosen,
                    group.target.get(mid, EMPTY) | spec.returned.get(mid, EMPTY),
                )
            )
        connectors = {c.connector: 0 for c in spec.configured if c.is_connector}
        for item in spec.configured:
            if not item.is_connector:
                connectors[item.connector] = max(connectors.get(item.connector, 0), item.task + 1)
        return PrepareAssignmentResponse(
            group_epoch=group.group_epoch,
            assignor_name=name,
            config_offset=group.assignment_config_offset(),
            connectors=connectors,
            members=tuple(members),
        )

    def validate_install(self, group: ConnectGroupView, req: InstallAssignmentRequest) -> InstalledTarget:
        """The target an InstallAssignment installs, checked against what its Prepare showed."""
        self.check_chosen(group, req.member_id, req.member_epoch, req.group_epoch)
        snapshot = self.snapshot
        if snapshot is None or snapshot[0] != req.group_epoch:
            raise RequestError(
                ErrorCode.INVALID_ASSIGNMENT,
                f"group epoch {req.group_epoch} is not the epoch the assignment was prepared for",
            )
        epoch, members, configured = snapshot
        if epoch <= group.assignment_epoch:
            # Never move the target back (e.g. a server-side assignor installed a newer one).
            raise RequestError(
                ErrorCode.INVALID_ASSIGNMENT,
                f"group epoch {epoch} is not newer than the installed target's {group.assignment_epoch}",
            )
        metadata: Mapping[str, AssignedMetadata]
        if req.error == 0:
            _validate_assignment(req.members, members, configured, req.metadata)
            target = {mid: items for mid, items in req.members.items() if mid in group.members}
            metadata = {mid: data for mid, data in req.metadata.items() if mid in group.members}
        else:
            # Seed 000 "Assignment Error": the current assignments stay (with their metadata);
            # the error itself reaches every member with its next assignment.
            target = {mid: items for mid, items in group.target.items() if mid in group.members}
            metadata = group.assignor_metadata
        for mid in group.members:
            target.setdefault(mid, EMPTY)
        return InstalledTarget(epoch, target, req.error, metadata)


class InstalledTarget(NamedTuple):
    """A validated InstallAssignment: the target, its epoch, the assignor's error and metadata."""

    epoch: int
    target: dict[str, Items]
    error: int
    metadata: Mapping[str, AssignedMetadata]


def _server_side_after(group: ConnectGroupView, req: HeartbeatRequest, member: Member | None) -> bool:
    """Whether some member would still advertise no client assignor after this heartbeat.

    Then no client assignor is common and :func:`no_cover_problem` is None whatever the ranges: the
    group's member index answers it without building every member's assignors (a join into a big
    server-side group). The heartbeat's member, and on a join with an instance id the static member
    it replaces, are not counted: their assignors are the request's.
    """
    if member is not None and req.client_assignors is None:
        return group.index.no_client > 0
    offered = req.client_assignors
    if offered is None:
        offered = member.metadata.client_assignors if member is not None else ()
    if not offered:
        return True
    excluded = {req.member_id or _JOINING}
    if req.instance_id:
        excluded |= group.index.with_instance(req.instance_id)
    return group.index.others_without_client(excluded, group.members) > 0


def _key(group: ConnectGroupView) -> tuple[int, int]:
    return (group.group_epoch, len(group.members))


def _validate_assignment(
    proposed: dict[str, Items],
    members: Iterable[str],
    configured: Items,
    metadata: Mapping[str, AssignedMetadata] | None = None,
) -> None:
    members = set(members)
    unknown = sorted((set(proposed) | set(metadata or ())) - members)
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
