"""Request rules of ConnectGroupHeartbeat that need no group state, and what a request says about
its member.

Pure functions: ``check_heartbeat`` runs before any group lookup (the coordinator calls it for a
group that does not exist yet), ``metadata_from`` folds a heartbeat into the member's metadata and
``epoch_relevant`` says which of its fields feed the assignment.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.state.api import TEMPORARY_LEAVE_EPOCH, HeartbeatRequest
from connect_bridge.state.errors import RequestError
from connect_bridge.state.model import ClientAssignor, MemberMetadata


def _assignor_problem(a: ClientAssignor) -> str | None:
    if not a.name:
        return "Assignor.Name must be non-empty"
    if a.minimum_version < -1:
        return f"Assignor {a.name}: MinimumVersion must be >= -1"
    if a.maximum_version < 0 or a.maximum_version < a.minimum_version:
        return f"Assignor {a.name}: MaximumVersion must be >= 0 and >= MinimumVersion"
    if not a.minimum_version <= a.version <= a.maximum_version:
        return f"Assignor {a.name}: Version must be within [MinimumVersion, MaximumVersion]"
    return None


def _heartbeat_problem(req: HeartbeatRequest, at_epoch_0: bool) -> str | None:
    joining = req.member_epoch == 0
    if not req.group_id:
        return "GroupId must be non-empty"
    if not req.member_id and not joining:
        return "MemberId must be non-empty"
    if req.member_epoch < TEMPORARY_LEAVE_EPOCH:
        return f"MemberEpoch must be >= -2, got {req.member_epoch}"
    if req.instance_id is not None and not req.instance_id:
        return "InstanceId, if provided, must be non-empty"
    if joining and req.rebalance_timeout_ms <= 0 and not at_epoch_0:
        # Every join, a known member's rejoin too: Kafka 4.3.1 answers INVALID_REQUEST there as well.
        return "RebalanceTimeoutMs must be larger than zero when joining"
    if req.server_assignor is not None and req.client_assignors:
        return "ServerAssignor and ClientAssignors cannot be used together"
    if req.member_epoch == TEMPORARY_LEAVE_EPOCH and not req.instance_id:
        return "MemberEpoch -2 (temporary leave) requires InstanceId"
    for a in req.client_assignors or ():
        problem = _assignor_problem(a)
        if problem:
            return problem
    return None


def check_heartbeat(req: HeartbeatRequest, at_epoch_0: bool = False) -> None:
    """Seed 000's INVALID_REQUEST rules: checks that need no group state (run before any lookup).

    ``at_epoch_0``: the member named is in the group at epoch 0 (seed 000: it waits there for the
    first client-side target), so its epoch-0 requests are heartbeats, not joins.
    """
    problem = _heartbeat_problem(req, at_epoch_0)
    if problem:
        raise RequestError(ErrorCode.INVALID_REQUEST, problem)


def metadata_from(req: HeartbeatRequest, base: MemberMetadata, session_timeout_ms: int) -> MemberMetadata:
    """``base`` updated with what the heartbeat carries (``None``: unchanged); the session timeout
    is the coordinator's."""
    # The principal only ever equals the member's own here (``state.ownership`` refuses the rest).
    changes: dict[str, Any] = {"session_timeout_ms": session_timeout_ms, "principal": req.principal}
    if req.instance_id is not None:
        changes["instance_id"] = req.instance_id
    if req.rebalance_timeout_ms > 0:
        changes["rebalance_timeout_ms"] = req.rebalance_timeout_ms
    if req.server_assignor is not None:
        changes["server_assignor"] = req.server_assignor
    if req.client_assignors is not None:
        changes["client_assignors"] = tuple(req.client_assignors)
    if req.url is not None:
        changes["url"] = req.url
    if req.config_offset is not None:
        changes["config_offset"] = req.config_offset
    if req.client_id:
        changes["client_id"] = req.client_id
    if req.client_host:
        changes["client_host"] = req.client_host
    return replace(base, **changes)


def epoch_relevant(m: MemberMetadata) -> tuple:
    """Metadata fields that feed the assignment: a change to any of them bumps the group epoch."""
    return (m.instance_id, m.url, m.server_assignor, m.client_assignors, m.protocol)
