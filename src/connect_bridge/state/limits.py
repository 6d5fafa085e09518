"""What a client may put in one group request: every size checked before anything changes.

Whatever a request carries can end up in a record (a member's metadata, its protocols, a leader's
assignments), and a record the store cannot hold (strings are int16-prefixed, a frame at most
64 MiB) would leave memory and disk disagreeing, or a log that can never be loaded again. So the
sizes are checked on the engine request, before the coordinator sees it, against limits small
enough that no record built from one request can outgrow the store, and large enough for any real
Connect cluster (a worker URL, a few protocols, thousands of owned tasks).

Pure: a walk over the request's dataclass fields, linear in what the request carries (which the
frame limit already bounds).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

INT16_STRING_BYTES = 32767
"""The longest string a record can hold (an int16 length prefix)."""


@dataclass(frozen=True, slots=True)
class RequestLimits:
    """Per-request bounds on what a client controls (settings: ``limits.*`` in docs/serve.md)."""

    max_string_bytes: int = 4096
    """Any string: group, member and instance ids, URLs, client ids, assignor and connector names."""
    max_bytes_field: int = 1024 * 1024
    """Any opaque byte field: classic protocol metadata, a SyncGroup assignment, assignor metadata."""
    max_items: int = 100_000
    """Entries of any array: owned tasks, protocols, assignors, a leader's assignments."""
    max_request_bytes: int = 8 * 1024 * 1024
    """All strings and byte fields of one request together (8 bytes counted per array entry)."""
    describe_max_groups: int = 1_000
    """Groups one DescribeGroups / ConnectGroupDescribe describes; later ones are deferred."""
    describe_max_members: int = 2_000
    """Members over the groups one describe request describes (the first group always is)."""
    describe_max_ids: int = 2_000
    """Group ids one describe request may name; more closes the connection."""
    max_cluster_request_bytes: int = 64 * 1024
    """Frame size of ApiVersions, FindCoordinator, Metadata (answered here), ListGroups and the
    describe requests; a larger one closes the connection before it is decoded."""

    def __post_init__(self) -> None:
        if not 0 < self.max_string_bytes <= INT16_STRING_BYTES:
            raise ValueError(f"max_string_bytes must be in 1..{INT16_STRING_BYTES}")
        for name in (
            "max_bytes_field",
            "max_items",
            "max_request_bytes",
            "describe_max_groups",
            "describe_max_members",
            "describe_max_ids",
            "max_cluster_request_bytes",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")


_SKIPPED = frozenset({"token"})
"""Fields the bridge sets itself (the parked request's handle), not the client."""


class _TooLarge(Exception):
    pass


def oversize(request: Any, limits: RequestLimits) -> str | None:
    """Why ``request`` breaks ``limits`` (one line naming the field), or None when it fits."""
    budget = [limits.max_request_bytes]

    def spend(path: str, n: int) -> None:
        budget[0] -= n
        if budget[0] < 0:
            raise _TooLarge(f"request larger than {limits.max_request_bytes} bytes (at {path})")

    def walk(value: Any, path: str) -> None:
        if value is None or isinstance(value, bool | int | float):
            return
        if isinstance(value, str):
            size = len(value.encode("utf-8", "surrogatepass"))
            if size > limits.max_string_bytes:
                raise _TooLarge(f"{path} is {size} bytes (limit {limits.max_string_bytes})")
            spend(path, size)
        elif isinstance(value, bytes | bytearray | memoryview):
            size = len(value)
            if size > limits.max_bytes_field:
                raise _TooLarge(f"{path} is {size} bytes (limit {limits.max_bytes_field})")
            spend(path, size)
        elif dataclasses.is_dataclass(value):
            for f in dataclasses.fields(value):
                if f.name not in _SKIPPED:
                    walk(getattr(value, f.name), f"{path}.{f.name}" if path else f.name)
        elif isinstance(value, Mapping):
            _count(value, path)
            for key, item in value.items():
                walk(key, f"{path}[]")
                walk(item, f"{path}[]")
        elif isinstance(value, tuple | list | set | frozenset):
            if not hasattr(value, "_fields"):  # a NamedTuple (a task id) is one value, not an array
                _count(value, path)
            for item in value:
                walk(item, f"{path}[]")

    def _count(value: Any, path: str) -> None:
        if len(value) > limits.max_items:
            raise _TooLarge(f"{path} has {len(value)} entries (limit {limits.max_items})")
        spend(path, 8 * len(value))

    try:
        walk(request, "")
    except _TooLarge as exc:
        return str(exc)
    return None
