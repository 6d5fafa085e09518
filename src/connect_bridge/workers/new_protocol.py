"""A new-protocol Connect worker's group logic, free of I/O.

It is what a worker does with ConnectGroupHeartbeat: join with epoch 0, send only what changed, stop
revoked work before acknowledging (the next heartbeat goes out at once), start newly assigned work,
and on FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID drop everything and rejoin with epoch 0. The simulated
drills and the asyncio client drive the same object; they only differ in how requests travel.
"""

from __future__ import annotations

from dataclasses import dataclass

from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.state.api import LEAVE_EPOCH, HeartbeatRequest, HeartbeatResponse
from connect_bridge.state.model import EMPTY, Items

_REJOIN_ERRORS = frozenset({int(ErrorCode.FENCED_MEMBER_EPOCH), int(ErrorCode.UNKNOWN_MEMBER_ID)})
_FATAL_ERRORS = frozenset({int(ErrorCode.FENCED_INSTANCE_ID)})
"""Another process took our ``group.instance.id``: fatal, as for a KIP-848 consumer (retrying would
keep a zombie alive). UNRELEASED_INSTANCE_ID (our id is still held by a process that has not left) is
retried instead: the Java consumer dies there, but a supervised worker is restarted and tries again,
which is what the retry models; it gets in once the old session expires."""


@dataclass(slots=True)
class Reaction:
    """What the worker must do after a response: stop and start work, and when to heartbeat next."""

    stop: Items = EMPTY
    start: Items = EMPTY
    epoch_changed: bool = False
    heartbeat_now: bool = False
    interval_ms: int = 0
    stale: bool = False
    """The response answered no heartbeat in flight (a duplicate): nothing changed, schedule nothing."""
    fatal: str | None = None
    """The process must die (everything is in ``stop``); why."""


@dataclass(slots=True)
class NewProtocolWorker:
    group_id: str
    url: str
    rebalance_timeout_ms: int = 60000
    instance_id: str | None = None
    server_assignor: str | None = None
    config_offset: int = -1
    member_id: str = ""
    member_epoch: int = 0
    running: Items = EMPTY
    _sent_owned: Items | None = None
    _full: bool = True
    leader_id: str = ""
    leader_url: str = ""
    session_timeout_ms: int = 10000
    _last_interval: int = 3000
    _sent_at: int = 0
    _session_start: int | None = None
    """Send time of the last heartbeat the coordinator answered: our session runs from there."""
    fatal_error: str | None = None
    _awaiting: bool = False
    """A heartbeat is in flight. A response when none is (a duplicated delivery) is stale: applying
    it again could re-apply an old assignment or restart the session from an old send time."""

    def heartbeat_request(self, now_ms: int = 0) -> HeartbeatRequest:
        """The next heartbeat: everything when (re)joining, otherwise only what changed."""
        self._sent_at = now_ms
        self._awaiting = True
        if self._full or self.member_epoch == 0:
            self._sent_owned = self.running
            return HeartbeatRequest(
                self.group_id,
                self.member_id,
                self.member_epoch,
                instance_id=self.instance_id,
                rebalance_timeout_ms=self.rebalance_timeout_ms,
                server_assignor=self.server_assignor,
                owned=self.running,
                url=self.url,
                config_offset=self.config_offset,
            )
        owned = None
        if self.running != self._sent_owned:
            owned = self._sent_owned = self.running
        return HeartbeatRequest(self.group_id, self.member_id, self.member_epoch, owned=owned)

    def leave_request(self) -> HeartbeatRequest:
        epoch = -2 if self.instance_id else LEAVE_EPOCH
        return HeartbeatRequest(self.group_id, self.member_id, epoch, instance_id=self.instance_id)

    def expire_session(self, now_ms: int) -> Reaction | None:
        """Stop everything once the coordinator must consider our session expired.

        The coordinator's session timer started when it processed our last answered heartbeat, which
        is no earlier than when we sent it; so stopping at send time + session timeout stops our work
        before the coordinator can hand it to someone else, even if we are cut off from it.
        """
        if self._session_start is None or now_ms - self._session_start < self.session_timeout_ms:
            return None
        return self._reset()

    def session_expiry_ms(self) -> int | None:
        return None if self._session_start is None else self._session_start + self.session_timeout_ms

    def _reset(self) -> Reaction:
        stop = self.running
        self.running = EMPTY
        changed = self.member_epoch != 0
        self.member_epoch = 0
        self._full = True
        self._session_start = None
        return Reaction(stop=stop, epoch_changed=changed, heartbeat_now=True, interval_ms=0)

    def on_response(self, resp: HeartbeatResponse) -> Reaction:
        if not self._awaiting:
            return Reaction(stale=True)
        self._awaiting = False
        if resp.error_code in _FATAL_ERRORS:
            self.fatal_error = f"ConnectGroupHeartbeat failed: {ErrorCode(resp.error_code).name}"
            stop, self.running = self.running, EMPTY
            return Reaction(stop=stop, fatal=self.fatal_error)
        if resp.error_code in _REJOIN_ERRORS:
            return self._reset()
        if resp.error_code not in (0, int(ErrorCode.COMPUTE_ASSIGNMENT)):
            self._full = True
            return Reaction(interval_ms=self._last_interval)
        self._full = False
        self._session_start = self._sent_at
        if resp.member_id:
            self.member_id = resp.member_id
        self._last_interval = resp.heartbeat_interval_ms or self._last_interval
        reaction = Reaction(interval_ms=self._last_interval)
        if resp.member_epoch != self.member_epoch:
            self.member_epoch = resp.member_epoch
            reaction.epoch_changed = True
        if resp.assignment is not None:
            target = resp.assignment.items
            self.leader_id = resp.assignment.leader_id
            self.leader_url = resp.assignment.leader_url
            self.config_offset = max(self.config_offset, resp.assignment.config_offset)
            reaction.stop = self.running - target
            if resp.assignment.error:
                # CONFIG_MISMATCH (or an assignor's error): the work was computed from an older
                # config than ours. As Connect's herder does with a failed assignment: start
                # nothing, stop what is no longer ours, and ask again (a full heartbeat, its
                # requestRejoin) until an assignment without error comes.
                self.running = self.running - reaction.stop
                self._full = True
            else:
                reaction.start = target - self.running
                self.running = target
            if reaction.stop:
                reaction.heartbeat_now = True  # acknowledge the revocation at once
        return reaction
