"""Watch relayed group requests and feed each group's adoption :class:`Observation` (issue 16).

While a group is coordinated upstream the bridge relays its JoinGroup/SyncGroup/Heartbeat/
LeaveGroup/DescribeGroups frames unchanged; to take the group over later it must know the
generation those exchanges formed (``state.adoption.observation``). This module decodes a relayed
request frame and the upstream's response frame with the bridge's own decoders (``codecs.requests``, the
spec-derived maps of ``wire.classic``) and hands the typed values to the group's
observation.

It sits beside the relay, never in its way: :meth:`RelayObserver.observe` never raises. A frame it
cannot decode (a version it does not know, a truncated or hostile frame, an error answer with no
body worth reading) is logged at DEBUG, counted in :attr:`RelayObserver.ignored`, and dropped; the
relay has already forwarded the bytes untouched.

Wired by ``bridge/adoption/wiring.py``: each relayed exchange of a group under adoption is fed
here once the upstream answered it (docs/adoption.md, "Wired").
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from connect_bridge.codecs.messages import ApiKey
from connect_bridge.codecs.requests import decode_request, decode_response
from connect_bridge.state.adoption.observation import Observation
from connect_bridge.wire import classic as wc

log = logging.getLogger("connect_bridge.adoption")

OBSERVED_APIS: frozenset[int] = frozenset(
    {ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP, ApiKey.DESCRIBE_GROUPS}
)
"""The relayed APIs that tell the observer something about a group's generation."""

Frame = bytes | bytearray | memoryview


class RelayObserver:
    """The observations of the groups under adoption, fed from relayed frames.

    ``watched``: which group ids to observe (all when None); a group's observation is created the
    first time one of its exchanges is seen.
    """

    def __init__(self, watched: Callable[[str], bool] | None = None) -> None:
        self.watched = watched
        self.observations: dict[str, Observation] = {}
        self.ignored = 0
        """Exchanges that could not be decoded (logged at DEBUG and dropped)."""

    def observation(self, group_id: str) -> Observation | None:
        return self.observations.get(group_id)

    def observing(self, group_id: str) -> Observation:
        """The group's observation, started now if none was (the takeover check keeps what it
        asks of the relay in it: ``Observation.ask_rejoin``)."""
        obs = self.observations.get(group_id)
        if obs is None:
            obs = self.observations[group_id] = Observation(group_id)
        return obs

    def observe(self, request: Frame, response: Frame, now_ms: int, client_host: str = "") -> None:
        """Feed one relayed exchange (both frames with their size prefix, as on the socket).

        ``client_host``: the address of the client connection the request came from (the upstream
        only sees the bridge's). Any other API is ignored; nothing here raises.
        """
        try:
            self._observe(request, response, now_ms, client_host)
        except Exception as exc:  # the relay must never break because of its observer
            self.ignored += 1
            log.debug("adoption observer ignored an exchange: %s: %s", type(exc).__name__, exc)

    def _observe(self, request: Frame, response: Frame, now_ms: int, client_host: str) -> None:
        decoded = decode_request(request)
        api_key, version = decoded.api_key, decoded.api_version
        if api_key not in OBSERVED_APIS:
            return
        body: Any = decoded.body
        answer: Any = decode_response(api_key, version, response)
        if answer._header.correlation_id != decoded.correlation_id:
            raise ValueError(
                f"response correlation id {answer._header.correlation_id} "
                f"does not answer request {decoded.correlation_id}"
            )
        if api_key == ApiKey.DESCRIBE_GROUPS:
            for described in wc.describe_groups_response_from_wire(answer):
                obs = self._for(described.group_id)
                if obs is not None:
                    obs.on_describe(described, now_ms)
            return
        obs = self._for(body.group_id or "")
        if obs is None:
            return
        if api_key == ApiKey.JOIN_GROUP:
            join = wc.join_from_wire(body, version, decoded.client_id, client_host)
            obs.on_join(join, wc.join_response_from_wire(answer), now_ms)
        elif api_key == ApiKey.SYNC_GROUP:
            obs.on_sync(wc.sync_from_wire(body, version), wc.sync_response_from_wire(answer), now_ms)
        elif api_key == ApiKey.HEARTBEAT:
            beat = wc.classic_heartbeat_from_wire(body, version)
            obs.on_heartbeat(beat, wc.classic_heartbeat_response_from_wire(answer), now_ms)
        else:
            obs.on_leave(wc.leave_from_wire(body, version), wc.leave_response_from_wire(answer), now_ms)

    def _for(self, group_id: str) -> Observation | None:
        if not group_id or (self.watched is not None and not self.watched(group_id)):
            return None
        return self.observing(group_id)


__all__ = ["OBSERVED_APIS", "RelayObserver"]
