"""``construct`` definitions of the Connect embedded protocol's wire layout.

Why this module exists separately from :mod:`connect_protocol`: it knows bytes and nothing else (no
dataclasses, no JSON), so the same declarative ``Struct`` can be used in two modes:

* **compiled** (``Struct(...).compile()``): the hot path. Leaf constructs emit calls to the small
  ``read_*``/``write_*`` functions below, which move whole arrays with one ``struct`` call. They only
  need to *detect* bad input (any exception will do); they do not explain it.
* **interpreted** (the same ``Struct`` object, not compiled): the diagnosis path. Only run after the
  compiled parser failed, it re-walks the bytes with Java's exact checks and raises
  :class:`CodecError` carrying the dotted field path and the absolute offset in the outer buffer.

Both modes implement the tolerance rules of Java's reader (docs/connect-protocol.md, "Decoding"):
an optional trailing field (:class:`Tail`) that starts exactly at the end of its buffer is
:data:`ABSENT`; a field cut partway is an error; trailing bytes are simply never read.
"""

from __future__ import annotations

import enum
import io
import struct
from collections.abc import Callable
from typing import Any, Final, Literal

from construct import Construct, FormatField, Struct, Subconstruct

from connect_bridge.codecs.errors import CodecError

__all__ = [
    "ABSENT",
    "Absent",
    "AbsentType",
    "ConnectorGroupArray",
    "Int",
    "Int32Array",
    "KafkaString",
    "NullableSized",
    "Tail",
    "Version",
    "Window",
    "assignment_struct",
    "subscription_struct",
]


class Absent(enum.Enum):
    """Marker type for a trailing optional field whose bytes are not in the payload at all.

    Distinct from ``None`` (the field is present on the wire and says "null": count/length -1) and from
    an empty value, so that re-encoding a decoded payload reproduces its bytes exactly.
    """

    ABSENT = "ABSENT"

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Final = Absent.ABSENT
"""The single :class:`Absent` value."""

AbsentType = Literal[Absent.ABSENT]
"""Type of :data:`ABSENT`, for annotations such as ``int | AbsentType``."""

MAX_STRING_BYTES: Final = 32767

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_unpack_i16 = _I16.unpack
_unpack_i32 = _I32.unpack
_unpack_i16_from = _I16.unpack_from
_unpack_i32_from = _I32.unpack_from
_pack_i16 = _I16.pack
_pack_i32 = _I32.pack
_NULL = _pack_i32(-1)

# Precompiled ">Ni" formats for the array sizes real payloads use; larger ones go through struct's cache.
_INT32_ARRAYS = tuple(struct.Struct(f">{n}i") for n in range(64))


class Malformed(ValueError):
    """Raised by the fast path; only means "re-walk with the interpreted parser to explain"."""


# --------------------------------------------------------------------------------------------------
# Fast path: called from the code that ``Struct.compile()`` generates. Detect, do not explain.
# --------------------------------------------------------------------------------------------------


def unpack_int32s(count: int, body: bytes) -> tuple[int, ...]:
    """Decode ``count`` big-endian int32 values from ``body`` in one ``struct`` call."""
    if count < 64:
        return _INT32_ARRAYS[count].unpack(body)
    return struct.unpack(f">{count}i", body)


def pack_int32s(values: tuple[int, ...]) -> bytes:
    """Encode an int32 array (count prefix plus elements) in one ``struct`` call."""
    count = len(values)
    if count < 63:
        return _INT32_ARRAYS[count + 1].pack(count, *values)
    return struct.pack(f">{count + 1}i", count, *values)


def read_version(stream: io.BytesIO) -> int:
    version: int = _unpack_i16(stream.read(2))[0]
    if version < 0:
        raise Malformed("negative version")
    return version


def read_string(stream: io.BytesIO) -> str:
    length: int = _unpack_i16(stream.read(2))[0]
    if length < 0:
        raise Malformed("negative string length")
    raw = stream.read(length)
    if len(raw) != length:
        raise Malformed("short string")
    return raw.decode("utf-8")


def read_int32_array(stream: io.BytesIO) -> tuple[int, ...]:
    count: int = _unpack_i32(stream.read(4))[0]
    if count < 0:
        raise Malformed("negative array size")
    body = stream.read(4 * count)
    if len(body) != 4 * count:
        raise Malformed("short array")
    return unpack_int32s(count, body)


def read_groups(stream: io.BytesIO, make: Callable[[str, tuple[int, ...]], Any]) -> tuple[Any, ...] | None:
    """A nullable array of (STRING connector, ARRAY int32 tasks) groups, inlined for speed.

    Works on the stream's whole buffer with ``unpack_from`` (``getvalue()`` of an unmodified BytesIO
    shares its bytes, no copy) and moves the stream position once at the end.
    """
    buf = stream.getvalue()
    pos = stream.tell()
    count: int = _unpack_i32_from(buf, pos)[0]
    pos += 4
    groups: tuple[Any, ...] | None = None
    if count >= 0:
        read: list[Any] = []
        append = read.append
        for _ in range(count):
            length: int = _unpack_i16_from(buf, pos)[0]
            pos += 2
            end = pos + length
            if length < 0 or end > len(buf):
                raise Malformed("bad string length")
            raw = buf[pos:end]
            ntasks: int = _unpack_i32_from(buf, end)[0]
            pos = end + 4
            if ntasks < 0:
                raise Malformed("negative array size")
            if ntasks < 64:
                tasks = _INT32_ARRAYS[ntasks].unpack_from(buf, pos)
            else:
                tasks = struct.unpack_from(f">{ntasks}i", buf, pos)
            pos += 4 * ntasks
            append(make(raw.decode("utf-8"), tasks))
        groups = tuple(read)
    stream.seek(pos)
    return groups


def read_nullable_sized(stream: io.BytesIO, parse: Callable[[io.BytesIO], Any]) -> Any:
    """NULLABLE_BYTES whose content is parsed by ``parse``; bytes after what it reads are ignored."""
    length: int = _unpack_i32(stream.read(4))[0]
    if length < 0:
        return None
    raw = stream.read(length)
    if len(raw) != length:
        raise Malformed("short bytes")
    return parse(io.BytesIO(raw))


def at_end(stream: io.BytesIO) -> bool:
    """True when no byte is left: Java's ``hasRemaining()`` test before an optional field."""
    if stream.read(1):
        stream.seek(-1, io.SEEK_CUR)
        return False
    return True


def write_string(value: str, stream: io.BytesIO) -> str:
    raw = value.encode("utf-8")
    stream.write(_pack_i16(len(raw)))  # struct.error above 32767 bytes
    stream.write(raw)
    return value


def write_int32_array(values: tuple[int, ...], stream: io.BytesIO) -> tuple[int, ...]:
    stream.write(pack_int32s(values))
    return values


def write_groups(groups: tuple[Any, ...] | None, stream: io.BytesIO) -> tuple[Any, ...] | None:
    """Groups are duck-typed: anything with ``.connector`` (str) and ``.tasks`` (int tuple)."""
    if groups is None:
        stream.write(_NULL)
        return None
    parts = [_pack_i32(len(groups))]
    append = parts.append
    arrays = _INT32_ARRAYS
    for group in groups:
        raw = group.connector.encode("utf-8")
        append(_pack_i16(len(raw)))
        append(raw)
        tasks = group.tasks
        count = len(tasks)
        if count < 63:
            append(arrays[count + 1].pack(count, *tasks))
        else:
            append(struct.pack(f">{count + 1}i", count, *tasks))
    stream.write(b"".join(parts))
    return groups


def write_nullable_sized(value: Any, stream: io.BytesIO, build: Callable[[Any, io.BytesIO], Any]) -> Any:
    if value is None:
        stream.write(_NULL)
        return None
    inner = io.BytesIO()
    build(value, inner)
    raw = inner.getvalue()
    stream.write(_pack_i32(len(raw)))
    stream.write(raw)
    return value


_FAST_IMPORT = (
    "from connect_bridge.codecs.connect_structs import ABSENT, at_end, read_groups, read_int32_array, "
    "read_nullable_sized, read_string, read_version, write_groups, write_int32_array, "
    "write_nullable_sized, write_string"
)


# --------------------------------------------------------------------------------------------------
# Diagnosis path helpers: exact Java checks, precise field path and absolute offset.
# --------------------------------------------------------------------------------------------------


class Window(io.BytesIO):
    """A stream over part of an outer buffer that knows where it starts in that buffer."""

    def __init__(self, data: bytes, base: int = 0) -> None:
        super().__init__(data)
        self.base = base


def _dotted(path: str) -> str:
    """``"(parsing) -> allocation -> revoked[1] -> tasks"`` -> ``"allocation.revoked[1].tasks"``."""
    return ".".join(path.split(" -> ")[1:])


def _position(stream: io.BytesIO) -> int:
    return getattr(stream, "base", 0) + stream.tell()


def _remaining(stream: io.BytesIO) -> int:
    here = stream.tell()
    end = stream.seek(0, io.SEEK_END)
    stream.seek(here)
    return end - here


def _read_exact(
    stream: io.BytesIO, size: int, what: str, path: str, start: int, element: bool = False
) -> bytes:
    """Read ``size`` bytes or explain why not.

    A struct field with nothing left gets Java's "missing value" text (the payload ended at a field
    boundary before a field without default); anything else is a field cut partway.
    """
    data = stream.read(size)
    if len(data) == size:
        return data
    field = _dotted(path)
    if not data and not element:
        name = field.rsplit(".", 1)[-1]
        raise CodecError(
            f"missing value for field '{name}' which has no default value", field=field, offset=start
        )
    raise CodecError(
        f"truncated {what}: needs {size} bytes, only {len(data)} available", field=field, offset=start
    )


def _check_count(stream: io.BytesIO, count: int, what: str, path: str, start: int) -> None:
    """Java's sanity check: a length or element count may not exceed the bytes left (an array's
    element size ignored). ``what`` is Java's wording: "string of length", "array of size"..."""
    left = _remaining(stream)
    if count > left:
        raise CodecError(
            f"Error reading {what} {count}, only {left} bytes available",
            field=_dotted(path),
            offset=start,
        )


# --------------------------------------------------------------------------------------------------
# Constructs
# --------------------------------------------------------------------------------------------------


class Int(FormatField):
    """Big-endian signed int16/int32/int64 (``fmt`` = h, l or q, construct's standard-size codes)."""

    def __init__(self, fmt: str) -> None:
        super().__init__(">", fmt)
        self.label = {"h": "int16", "l": "int32", "q": "int64"}[fmt]
        self.packer = struct.Struct(self.fmtstr)

    def _parse(self, stream: io.BytesIO, context: Any, path: str) -> int:
        start = _position(stream)
        value: int = self.packer.unpack(_read_exact(stream, self.length, self.label, path, start))[0]
        return value


class Version(Int):
    """The int16 header. Java rejects only a negative version; the number never steers parsing."""

    def __init__(self) -> None:
        super().__init__("h")

    def _parse(self, stream: io.BytesIO, context: Any, path: str) -> int:
        start = _position(stream)
        version = super()._parse(stream, context, path)
        if version < 0:
            # Java uses this text for subscriptions and assignments alike.
            raise CodecError(
                f"Unsupported subscription version: {version}", field=_dotted(path), offset=start
            )
        return version

    def _emitparse(self, code: Any) -> str:
        code.append(_FAST_IMPORT)
        return "read_version(io)"


class _FastPath:
    """The compiled code of this module's constructs: one expression over the fast-path functions.

    Every construct here compiles to calls of those functions, so the import they need is added in
    one place and each construct says only its expression (``_fast_parse``, ``_fast_build``).
    """

    def _emitparse(self, code: Any) -> str:
        code.append(_FAST_IMPORT)
        return self._fast_parse(code)

    def _emitbuild(self, code: Any) -> str:
        code.append(_FAST_IMPORT)
        return self._fast_build(code)

    def _fast_parse(self, code: Any) -> str:
        raise NotImplementedError

    def _fast_build(self, code: Any) -> str:
        raise NotImplementedError


class _FastLeaf(_FastPath, Construct):
    """A leaf with a checked parser for diagnosis and one fast reader/writer pair for compiled code.

    The interpreted build and the compiled one must write the same bytes, so both call the one
    ``writer`` named here; the compiled parse calls ``reader``, the interpreted one ``read_checked``.
    """

    reader: Callable[[io.BytesIO], Any]
    writer: Callable[[Any, io.BytesIO], Any]

    @staticmethod
    def read_checked(stream: io.BytesIO, path: str, element: bool = False) -> Any:
        raise NotImplementedError

    def _parse(self, stream: io.BytesIO, context: Any, path: str) -> Any:
        return self.read_checked(stream, path)

    def _build(self, obj: Any, stream: io.BytesIO, context: Any, path: str) -> Any:
        return self.writer(obj, stream)

    def _fast_parse(self, code: Any) -> str:
        return f"{self.reader.__name__}(io)"

    def _fast_build(self, code: Any) -> str:
        return f"{self.writer.__name__}(obj, io)"


class KafkaString(_FastLeaf):
    """Kafka STRING: int16 byte length (not negative) + UTF-8 bytes; never null."""

    reader = staticmethod(read_string)
    writer = staticmethod(write_string)

    @staticmethod
    def read_checked(stream: io.BytesIO, path: str, element: bool = False) -> str:
        """Java's STRING checks, plus strict UTF-8 (Java would substitute U+FFFD; we refuse)."""
        start = _position(stream)
        length: int = _unpack_i16(_read_exact(stream, 2, "string length", path, start, element))[0]
        if length < 0:
            raise CodecError(f"String length {length} cannot be negative", field=_dotted(path), offset=start)
        _check_count(stream, length, "string of length", path, start)
        try:
            return stream.read(length).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CodecError(
                f"invalid UTF-8 in string at byte {exc.start} of {length}", field=_dotted(path), offset=start
            ) from None


class Int32Array(_FastLeaf):
    """Non-nullable ARRAY of int32 (a group's ``tasks``), moved with one ``struct`` call."""

    reader = staticmethod(read_int32_array)
    writer = staticmethod(write_int32_array)

    @staticmethod
    def read_checked(stream: io.BytesIO, path: str, element: bool = False) -> tuple[int, ...]:
        start = _position(stream)
        count: int = _unpack_i32(_read_exact(stream, 4, "array size", path, start, element))[0]
        if count < 0:
            raise CodecError(f"Array size {count} cannot be negative", field=_dotted(path), offset=start)
        _check_count(stream, count, "array of size", path, start)
        body = stream.read(4 * count)
        if len(body) != 4 * count:
            index = len(body) // 4
            raise CodecError(
                f"truncated int32 array: element {index} of {count} needs 4 bytes, only "
                f"{len(body) % 4} available",
                field=f"{_dotted(path)}[{index}]",
                offset=start + 4 + 4 * index,
            )
        return unpack_int32s(count, body)


class ConnectorGroupArray(_FastPath, Construct):
    """Nullable ARRAY of connector groups ``{connector: STRING, tasks: ARRAY int32}``.

    ``make(connector, tasks)`` builds each element, so the wire layer stays free of model classes; on
    build, elements only need ``.connector`` and ``.tasks``. Any negative count reads as null (Java).
    """

    def __init__(self, make: Callable[[str, tuple[int, ...]], Any]) -> None:
        super().__init__()
        self.make = make

    def _parse(self, stream: io.BytesIO, context: Any, path: str) -> tuple[Any, ...] | None:
        start = _position(stream)
        count: int = _unpack_i32(_read_exact(stream, 4, "array size", path, start))[0]
        if count < 0:
            return None
        _check_count(stream, count, "array of size", path, start)
        groups = []
        for index in range(count):
            connector = KafkaString.read_checked(stream, f"{path}[{index}] -> connector", element=True)
            tasks = Int32Array.read_checked(stream, f"{path}[{index}] -> tasks", element=True)
            groups.append(self.make(connector, tasks))
        return tuple(groups)

    def _build(self, obj: Any, stream: io.BytesIO, context: Any, path: str) -> Any:
        return write_groups(obj, stream)

    def _fast_parse(self, code: Any) -> str:
        code.linkedinstances[id(self)] = self
        return f"read_groups(io, linkedinstances[{id(self)}].make)"

    def _fast_build(self, code: Any) -> str:
        return "write_groups(obj, io)"


class NullableSized(_FastPath, Subconstruct):
    """NULLABLE_BYTES holding one embedded payload (the subscription's ``allocation``).

    Negative length = null. The embedded parser sees only these bytes, so whatever it does not read
    (a newer version's extra fields) is ignored, and its own optional tail can be absent.
    """

    def _parse(self, stream: io.BytesIO, context: Any, path: str) -> Any:
        start = _position(stream)
        length: int = _unpack_i32(_read_exact(stream, 4, "bytes length", path, start))[0]
        if length < 0:
            return None
        _check_count(stream, length, "bytes of size", path, start)
        inner = Window(stream.read(length), base=start + 4)
        return self.subcon._parsereport(inner, context, path)

    def _build(self, obj: Any, stream: io.BytesIO, context: Any, path: str) -> Any:
        return write_nullable_sized(
            obj, stream, lambda value, inner: self.subcon._build(value, inner, context, path)
        )

    def _fast_parse(self, code: Any) -> str:
        return f"read_nullable_sized(io, lambda io: {self.subcon._compileparse(code)})"

    def _fast_build(self, code: Any) -> str:
        return f"write_nullable_sized(obj, io, lambda obj, io: {self.subcon._compilebuild(code)})"


class Tail(_FastPath, Subconstruct):
    """An optional trailing field: :data:`ABSENT` when the buffer ends exactly where it would start.

    Because every later field then also starts at the end, a payload cut at a field boundary reads as
    "all remaining fields absent", which is how Java's v1 reader reads v0 bytes. On build,
    :data:`ABSENT` writes nothing (callers must not put a present field after an absent one).
    """

    def _parse(self, stream: io.BytesIO, context: Any, path: str) -> Any:
        if at_end(stream):
            return ABSENT
        return self.subcon._parsereport(stream, context, path)

    def _build(self, obj: Any, stream: io.BytesIO, context: Any, path: str) -> Any:
        if obj is ABSENT:
            return ABSENT
        return self.subcon._build(obj, stream, context, path)

    def _fast_parse(self, code: Any) -> str:
        return f"(ABSENT if at_end(io) else {self.subcon._compileparse(code)})"

    def _fast_build(self, code: Any) -> str:
        return f"(ABSENT if obj is ABSENT else {self.subcon._compilebuild(code)})"


# --------------------------------------------------------------------------------------------------
# Layouts (docs/connect-protocol.md, "Wire layout"). One struct per kind: v0 is v1 with the tail absent.
# --------------------------------------------------------------------------------------------------


def assignment_struct(make_group: Callable[[str, tuple[int, ...]], Any]) -> Struct:
    """Assignment v1/v2 (a prefix of it is v0): header, error..config_offset, then the optional tail."""
    groups = ConnectorGroupArray(make_group)
    return Struct(
        "version" / Version(),
        "error" / Int("h"),
        "leader" / KafkaString(),
        "leader_url" / KafkaString(),
        "config_offset" / Int("q"),
        "assignment" / Tail(groups),
        "revoked" / Tail(groups),
        "delay" / Tail(Int("l")),
    )


def subscription_struct(assignment: Struct) -> Struct:
    """Subscription v1/v2 (a prefix of it is v0); the allocation embeds a whole assignment payload."""
    return Struct(
        "version" / Version(),
        "url" / KafkaString(),
        "config_offset" / Int("q"),
        "allocation" / Tail(NullableSized(assignment)),
    )
