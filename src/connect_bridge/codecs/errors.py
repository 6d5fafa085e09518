"""The codec layer's single error type.

Callers (the CLI, the server's request decoder) must be able to report *where* bytes went wrong without
knowing which codec failed, so every decode/encode failure carries the field path and byte offset.
"""

from __future__ import annotations


class CodecError(ValueError):
    """Bytes (or a value to encode) that a codec cannot accept.

    ``field`` is a dotted path such as ``allocation.assignment[2].tasks``; ``offset`` is the byte offset
    in the outermost buffer where the failing field starts (``None`` for encode-side errors).
    """

    def __init__(self, message: str, *, field: str = "", offset: int | None = None) -> None:
        self.reason = message
        self.field = field
        self.offset = offset
        where = []
        if field:
            where.append(f"field '{field}'")
        if offset is not None:
            where.append(f"byte offset {offset}")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)
