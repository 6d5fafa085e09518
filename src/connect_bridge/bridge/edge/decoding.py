"""Decoding request frames without letting their size stall the event loop or exhaust memory.

kafka-python's decoders build one Python object per array entry, about a microsecond and 80 bytes
each, and an entry can be as small as three bytes: one 8 MiB JoinGroup of empty protocols held
the event loop for seconds and took 200+ MB (issue 11.6). The limits on what a request may carry
(:mod:`connect_bridge.state.limits`) are checked on the decoded request, too late for that. So:

- a group frame larger than any request the limits admit is refused before it is decoded
  (:meth:`FrameDecoder.too_large`): every counted byte of a request is at least one byte of its
  frame, so a frame above ``max_request_bytes`` plus the fixed fields can never pass;
- a large frame that may pass is decoded on one background thread, one frame at a time, so the
  event loop keeps answering other clients (the GIL is handed over every few milliseconds) and at
  most one large decode's objects are alive at once.
"""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor

from connect_bridge.codecs.requests import DecodedRequest, RequestDecodeError, decode_request
from connect_bridge.state.limits import RequestLimits

IN_THREAD_BYTES = 64 * 1024
"""Frames above this are decoded off the event loop (a smaller one decodes in well under 50 ms)."""
FIXED_FIELDS_BYTES = 64 * 1024
"""Room for the header and the fixed-size fields, which the request limits do not count."""


class FrameDecoder:
    """Decodes the frames the bridge answers itself; owns the one background decoding thread."""

    def __init__(self, limits: RequestLimits) -> None:
        self.max_frame_bytes = limits.max_request_bytes + FIXED_FIELDS_BYTES
        self._thread: ThreadPoolExecutor | None = None

    def too_large(self, size: int) -> bool:
        """Whether a group request frame of ``size`` bytes cannot fit the request limits."""
        return size > self.max_frame_bytes

    async def decode(self, payload: bytes) -> DecodedRequest | RequestDecodeError:
        """The decoded request, or the decode error (returned, so callers answer it in one place)."""
        try:
            if len(payload) <= IN_THREAD_BYTES:
                return decode_request(payload, framed=False)
            if self._thread is None:
                self._thread = ThreadPoolExecutor(1, thread_name_prefix="connect-bridge-decode")
            decode = functools.partial(decode_request, payload, framed=False)
            return await asyncio.get_running_loop().run_in_executor(self._thread, decode)
        except RequestDecodeError as exc:
            return exc

    def close(self) -> None:
        if self._thread is not None:
            self._thread.shutdown(wait=False, cancel_futures=True)
            self._thread = None
