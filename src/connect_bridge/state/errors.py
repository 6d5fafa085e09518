"""The coordinator's one rejection type."""

from __future__ import annotations

from connect_bridge.codecs.error_codes import ErrorCode


class RequestError(Exception):
    """A request the group rejects; ``code`` goes on the wire, state is untouched."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
