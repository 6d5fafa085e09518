"""The bridge's own requests to an upstream group coordinator, for adoption (issue 16).

The takeover condition is checked against the upstream's own DescribeGroups, never a guess from
relayed traffic, and after a takeover the upstream group is emptied with one LeaveGroup naming the
adopted member ids (KIP-345 batch leave, v3+). Both go over the bridge's own connection with its
own upstream identity (``upstream_tls`` / ``upstream_sasl``), to the coordinator FindCoordinator
names: never through a worker's relayed link, whose principal is the worker's.
"""

from __future__ import annotations

import contextlib
import logging

from connect_bridge.bridge.security.sasl_client import upstream_login
from connect_bridge.bridge.security.upstream_security import UpstreamSecurity
from connect_bridge.codecs import messages as m
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.state.classic.state import ClassicDescribedGroup
from connect_bridge.wire import classic as wc
from connect_bridge.wire.client import ClientError, KafkaConnection, find_coordinator

log = logging.getLogger("connect_bridge.adoption")

DESCRIBE_GROUPS_VERSION = 5
LEAVE_GROUP_VERSION = 5
REQUEST_TIMEOUT_S = 10.0
_RETRIABLE = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE})


class UpstreamGroupError(ConnectionError):
    """The upstream coordinator could not be asked (unreachable, moved, or answered an error)."""


class UpstreamGroups:
    """One connection per group coordinator, opened on first use and dropped on any failure."""

    def __init__(self, bootstrap: list[tuple[str, int]], security: UpstreamSecurity) -> None:
        self.bootstrap = bootstrap
        self.security = security
        self._coordinators: dict[str, KafkaConnection] = {}

    async def _connect(self, host: str, port: int) -> KafkaConnection:
        return await KafkaConnection.connect(
            host,
            port,
            client_id="connect-bridge-adoption",
            timeout=REQUEST_TIMEOUT_S,
            ssl=self.security.ssl,
            login=upstream_login(self.security.sasl),
        )

    async def _coordinator(self, group_id: str) -> KafkaConnection:
        conn = self._coordinators.get(group_id)
        if conn is not None:
            return conn
        try:
            host, port = await find_coordinator(self.bootstrap, group_id, self._connect, REQUEST_TIMEOUT_S)
        except ClientError as exc:
            raise UpstreamGroupError(str(exc)) from None
        conn = await self._connect(host, port)
        self._coordinators[group_id] = conn
        return conn

    async def _ask(self, group_id: str, message: object, version: int) -> object:
        try:
            conn = await self._coordinator(group_id)
            return await conn.request(message, version, REQUEST_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            await self._forget(group_id)
            raise UpstreamGroupError(f"upstream coordinator of {group_id}: {exc}") from None

    async def describe(self, group_id: str) -> ClassicDescribedGroup:
        """The upstream's DescribeGroups answer for ``group_id`` (raises :class:`UpstreamGroupError`)."""
        request = m.DescribeGroupsRequest(groups=[group_id], include_authorized_operations=False)
        answer = wc.describe_groups_response_from_wire(
            await self._ask(group_id, request, DESCRIBE_GROUPS_VERSION)  # type: ignore[arg-type]
        )[0]
        if answer.error_code in _RETRIABLE:
            await self._forget(group_id)
            raise UpstreamGroupError(
                f"DescribeGroups of {group_id} answered {ErrorCode(answer.error_code).name}"
            )
        return answer

    async def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> dict[str, int]:
        """LeaveGroup of ``members`` (member id, group instance id): the error code of each."""
        identities = [
            m.LeaveGroupRequest.MemberIdentity(
                member_id=member_id, group_instance_id=instance, reason="adopted by connect-bridge"
            )
            for member_id, instance in members
        ]
        answer = await self._ask(
            group_id, m.LeaveGroupRequest(group_id=group_id, members=identities), LEAVE_GROUP_VERSION
        )
        top = answer.error_code  # type: ignore[attr-defined]
        if top != ErrorCode.NONE:
            if top in _RETRIABLE:
                await self._forget(group_id)
            raise UpstreamGroupError(f"LeaveGroup of {group_id} answered {ErrorCode(top).name}")
        return {entry.member_id: entry.error_code for entry in answer.members}  # type: ignore[attr-defined]

    async def _forget(self, group_id: str) -> None:
        conn = self._coordinators.pop(group_id, None)
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    async def close(self) -> None:
        for group_id in list(self._coordinators):
            await self._forget(group_id)


__all__ = ["UpstreamGroupError", "UpstreamGroups"]
