"""The coordinator's error types: the one rejection (a Kafka error code for the wire) and the
broken invariant.

Kept in a module of their own, which the compiled engine (``drills/compiled.py``) leaves as Python:
mypyc cannot compile a class that inherits ``RuntimeError``."""

from __future__ import annotations

from connect_bridge.codecs.error_codes import ErrorCode


class RequestError(Exception):
    """A request the group rejects; ``code`` goes on the wire, state is untouched."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class IllegalStateError(RuntimeError):
    """An internal invariant broke (Kafka throws IllegalStateException in the same places)."""
