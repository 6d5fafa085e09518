"""Which request frames the server reads and decodes at all (issues 11.4 and 11.6).

Guards before a frame costs the event loop anything: large frames share one byte budget over
all connections while they are read; before authentication a frame above 64 KiB is read against a
small budget of its own (``connections.max_unauthenticated_buffered_bytes``), so an unauthenticated
peer neither reserves the authenticated clients' budget nor holds a large partial frame outside any
budget; and a frame larger than any request of its API may be is closed on undecoded (decoding
costs a few microseconds per array entry: a 1 MB FindCoordinator of 100,000 keys held the loop
0.4 s). Apart from ``server.py``, which keeps the connections.
"""

from __future__ import annotations

import logging
from typing import Any

from connect_bridge.bridge.coordination.api_table import (
    CLUSTER_FRAMES_EMBEDDED,
    CLUSTER_FRAMES_PROXY,
    GROUP_FRAMES,
)
from connect_bridge.bridge.edge.connection import Connection
from connect_bridge.codecs.messages import api_spec
from connect_bridge.codecs.requests import request_api_key

log = logging.getLogger("connect_bridge.server")

LARGE_FRAME = 1024 * 1024
"""Frames above this count against ``max_buffered_bytes`` while they are read."""
UNAUTHENTICATED_SMALL_FRAME = 64 * 1024
"""Before authentication, frames above this count against ``max_unauthenticated_buffered_bytes``."""


class FrameAdmission:
    """The two guards for one server (``options``: its ``ServerOptions``; ``decoder``: its
    ``FrameDecoder``, which knows the largest group request the limits admit)."""

    def __init__(self, options: Any, decoder: Any) -> None:
        self.options = options
        self.decoder = decoder
        self.buffered = 0
        """Bytes of large frames being read right now, over all connections."""
        self.unauthenticated_buffered = 0
        """Bytes of unauthenticated frames above ``UNAUTHENTICATED_SMALL_FRAME`` being read right now."""
        self.cluster_frames = CLUSTER_FRAMES_PROXY if options.upstream else CLUSTER_FRAMES_EMBEDDED
        """Requests refused above ``limits.max_cluster_request_bytes`` (``api_table.Limit``)."""
        self.plain_bytes = min(LARGE_FRAME, options.limits.max_cluster_request_bytes, decoder.max_frame_bytes)
        """An authenticated frame up to this size is read without a budget (``unbudgeted``) and is
        within every bound (``over_bound``): the server asks neither for it (most frames; a
        steady heartbeat is a few dozen bytes)."""

    @staticmethod
    def unbudgeted(size: int, *, authenticated: bool = True) -> bool:
        """Whether a frame of ``size`` bytes is read without any budget (``read_payload`` would
        read it at once): a caller may then read it itself, without the extra coroutine."""
        return size <= (LARGE_FRAME if authenticated else UNAUTHENTICATED_SMALL_FRAME)

    async def read_payload(self, conn: Connection, size: int, *, authenticated: bool = True) -> bytes | None:
        """The frame's bytes; None (close) when it would exceed its budget (``authenticated``
        False: the connection must still authenticate, and only the unauthenticated budget applies)."""
        if authenticated:
            budget, what = self.options.max_buffered_bytes, "large frames"
        else:
            budget = self.options.connections.max_unauthenticated_buffered_bytes
            what = "frames before authentication (connections.max_unauthenticated_buffered_bytes)"
        if self.unbudgeted(size, authenticated=authenticated):
            return await conn.reader.readexactly(size)
        held = self.buffered if authenticated else self.unauthenticated_buffered
        if held + size > budget:
            log.warning(
                "closing %s: a %d-byte frame would exceed the %d bytes of %s being read at once",
                conn.host,
                size,
                budget,
                what,
            )
            return None
        self._hold(authenticated, size)
        try:
            return await conn.reader.readexactly(size)
        finally:
            self._hold(authenticated, -size)

    def _hold(self, authenticated: bool, size: int) -> None:
        if authenticated:
            self.buffered += size
        else:
            self.unauthenticated_buffered += size

    def over_bound(self, conn: Connection, payload: bytes, size: int) -> bool:
        """A frame larger than any request of its API may be: closed on, undecoded."""
        limits = self.options.limits
        if size <= limits.max_cluster_request_bytes and size <= self.decoder.max_frame_bytes:
            return False  # within every bound: most frames, and no need to look at the API
        api_key = request_api_key(payload)
        if size > limits.max_cluster_request_bytes and api_key in self.cluster_frames:
            limit, what = limits.max_cluster_request_bytes, "limit %d"
        elif self.decoder.too_large(size) and api_key in GROUP_FRAMES:
            # No request the limits admit is this large.
            limit, what = self.decoder.max_frame_bytes, "limit %d, limits.max_request_bytes"
        else:
            return False
        name = api_spec(api_key).name
        log.warning(f"closing %s: %s request of %d bytes ({what})", conn.host, name, size, limit)
        return True


__all__ = ["LARGE_FRAME", "UNAUTHENTICATED_SMALL_FRAME", "FrameAdmission"]
