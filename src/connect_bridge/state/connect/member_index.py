"""Per-group aggregates over the members' metadata, kept in step with every applied record.

A join into a group of 10,000 members used to pay several passes over every member: the assignor
vote, the shared client assignors, the largest reported config offset, and the url and instance id
lookups that return held work or find a static member. Kafka's ``ConsumerGroup`` keeps such counts
and indexes and updates them in ``updateMember``/``removeMember``; :class:`MemberIndex` does the same.

It is changed only by ``ConnectGroup``'s appliers (``connect.state``) (member metadata record,
member tombstone and the placeholder member a replayed current assignment creates), the code replay
runs, so a restarted coordinator builds the very same aggregates. Every answer equals the
from-scratch pass over the members in their dict order (``tests/test_member_index.py`` checks it
after every step of random histories, and after replaying them): where several members share a url
or an instance id, the member's position in that order decides, as it did in the passes this
replaces.
"""

from __future__ import annotations

from bisect import bisect_left, insort

from connect_bridge.state.model import MemberMetadata, MemberState


def _count(counts: dict, key: object, delta: int) -> None:
    """Add ``delta`` to a multiset; a key whose count drops to 0 goes (so keys = the present values)."""
    n = counts.get(key, 0) + delta
    if n:
        counts[key] = n
    else:
        del counts[key]


def _bucket(index: dict, key: object, mid: str, add: bool) -> None:
    """Add ``mid`` to (or remove it from) the members having ``key``."""
    if add:
        index.setdefault(key, {})[mid] = None
        return
    bucket = index[key]
    del bucket[mid]
    if not bucket:
        del index[key]


class MemberIndex:
    """Counts and lookups over one group's members, each O(1) (or O(distinct values)) per change."""

    __slots__ = (
        "_instances",
        "_max_offset",
        "_next",
        "_offsets",
        "_position",
        "_urls",
        "client_names",
        "ids",
        "no_client",
        "server_votes",
        "states",
    )

    def __init__(self) -> None:
        self._position: dict[str, int] = {}
        """Each member's place in the group's member dict (insertion order): it breaks ties."""
        self._next = 0
        self.ids: list[str] = []
        """Member ids in sorted order: the assignors' member list, without sorting 10,000 ids a join."""
        self.server_votes: dict[str | None, int] = {}
        """Members per server assignor asked for (None: none, i.e. the configured default)."""
        self.no_client = 0
        """Members advertising no client assignor: while there is one, no client assignor is common."""
        self.client_names: dict[str, int] = {}
        """Members advertising each client assignor name (a name shared by all has the member count)."""
        self._urls: dict[str, dict[str, None]] = {}
        self._instances: dict[str | None, dict[str, None]] = {}
        self._offsets: dict[int, int] = {}
        self._max_offset: int | None = None
        self.states: dict[tuple[str, str], int] = {}
        """Members per (protocol, reconciliation state): the bridge's metrics after every change."""

    # ------------------------------------------------------------------ changes (appliers only)
    def added(self, mid: str, metadata: MemberMetadata, state: MemberState) -> None:
        """A member entered the group's dict (at its end)."""
        self._position[mid] = self._next
        self._next += 1
        insort(self.ids, mid)
        self._facets(mid, metadata, True)
        _count(self.states, (metadata.protocol, state.value), 1)

    def removed(self, mid: str, metadata: MemberMetadata, state: MemberState) -> None:
        """A member left the group's dict."""
        self._facets(mid, metadata, False)
        _count(self.states, (metadata.protocol, state.value), -1)
        del self._position[mid]
        del self.ids[bisect_left(self.ids, mid)]

    def changed(self, mid: str, old: MemberMetadata, new: MemberMetadata, state: MemberState) -> None:
        """A member's metadata was replaced in place (its position stays)."""
        if old is not new:
            self._facets(mid, old, False)
            self._facets(mid, new, True)
            if old.protocol != new.protocol:
                _count(self.states, (old.protocol, state.value), -1)
                _count(self.states, (new.protocol, state.value), 1)

    def state_changed(self, protocol: str, old: MemberState, new: MemberState) -> None:
        """A member's current assignment moved it from one reconciliation state to another."""
        if old is not new:
            _count(self.states, (protocol, old.value), -1)
            _count(self.states, (protocol, new.value), 1)

    def _facets(self, mid: str, md: MemberMetadata, add: bool) -> None:
        delta = 1 if add else -1
        _count(self.server_votes, md.server_assignor or None, delta)
        if md.client_assignors:
            for name in {a.name for a in md.client_assignors}:
                _count(self.client_names, name, delta)
        else:
            self.no_client += delta
        if md.url:
            _bucket(self._urls, md.url, mid, add)
        _bucket(self._instances, md.instance_id, mid, add)
        offset = md.config_offset
        _count(self._offsets, offset, delta)
        if add:
            if self._max_offset is None or offset > self._max_offset:
                self._max_offset = offset
        elif offset == self._max_offset and offset not in self._offsets:
            self._max_offset = max(self._offsets) if self._offsets else None

    # ------------------------------------------------------------------ queries
    def server_assignor(self, default: str) -> str:
        """The most asked-for server assignor (ties: the smallest name); ``default`` with no members."""
        votes = self.server_votes
        if None in votes:
            votes = dict(votes)
            votes[default] = votes.get(default, 0) + votes.pop(None)
        if not votes:
            return default
        return min(votes, key=lambda n: (-votes[n], n))  # type: ignore[arg-type, return-value]

    def shared_client_names(self, members: int) -> set[str]:
        """Client assignor names every one of ``members`` members advertises (empty if one has none)."""
        if not members or self.no_client:
            return set()
        return {name for name, n in self.client_names.items() if n == members}

    def max_config_offset(self) -> int | None:
        """The largest config offset a member reported; None without members."""
        return self._max_offset

    def first_with_instance(self, instance_id: str | None) -> str | None:
        """The earliest member (in the group's order) with this instance id."""
        bucket = self._instances.get(instance_id)
        if not bucket:
            return None
        return next(iter(bucket)) if len(bucket) == 1 else min(bucket, key=self._position.__getitem__)

    def last_with_instance(self, instance_id: str) -> str | None:
        """The latest member (in the group's order) with this instance id."""
        return self._last(self._instances.get(instance_id))

    def last_with_url(self, url: str) -> str | None:
        """The latest member (in the group's order) with this (non-empty) REST url."""
        return self._last(self._urls.get(url))

    def _last(self, bucket: dict[str, None] | None) -> str | None:
        if not bucket:
            return None
        return next(iter(bucket)) if len(bucket) == 1 else max(bucket, key=self._position.__getitem__)

    def others_without_client(self, excluded: set[str], metadata_of: dict) -> int:
        """Members without a client assignor, not counting ``excluded`` member ids."""
        n = self.no_client
        for mid in excluded:
            member = metadata_of.get(mid)
            if member is not None and not member.metadata.client_assignors:
                n -= 1
        return n

    def with_instance(self, instance_id: str | None) -> set[str]:
        """Every member with this instance id."""
        return set(self._instances.get(instance_id, ()))
