"""Engine values <-> JSON-spec messages, derived from the specs: one declarative map per struct.

Why: wire conversion used to be written out per API and per version (``x if version >= 5 else
None``, field-by-field copies in both directions). The specs already say which fields each version
has and where a string may be null, so a :class:`StructMap` only names what differs between the
engine value and the wire struct; everything else is read off the spec:

* a wire field maps to the engine attribute of the same (snake_case) name unless a :class:`Field`
  says otherwise. Encoding with a map that leaves a wire field unaccounted for fails when the map is
  compiled, so a spec change cannot silently drop a field;
* encoding at a version sets only the fields that version has. In a *request*, a non-ignorable field
  the version lacks but the value sets is a :class:`CodecError` (the Java client's
  ``UnsupportedVersionException``: static membership below JoinGroup v5, a ListGroups filter below
  v4/v5); an ignorable one is dropped, as in responses;
* decoding a version that lacks a field gives the engine ``None`` when the spec makes the field
  nullable in some version (it was "not sent"), else the engine's own default;
* kafka-python does not enforce nullability, so a string nullable only from some version
  (JoinGroupResponse ``ProtocolName``, v7+) is written "" below it and "" is read back as null, as
  Kafka's ``JoinGroupResponse`` does;
* a :class:`CodecError` raised while decoding a nested struct gets the struct's path prefixed
  (``Members[2].ConnectorsAndTasks.Tasks[0].TaskIds``), so converters only name their own field.

Each (map, struct, version, direction) compiles once into a plain Python function, the way
kafka-python compiles its encoders, so a converted heartbeat costs what a hand-written copy did.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from connect_bridge.codecs.errors import CodecError

__all__ = [
    "IGNORED",
    "Field",
    "SameAs",
    "SpecMap",
    "StructMap",
    "as_bytes",
    "element",
    "empty_if_null",
    "null_if_empty",
    "read_each",
    "unsendable",
]

_UNSET: Any = object()


def empty_if_null(value: str | None) -> str:
    """A nullable wire string as the engine's non-optional ``str``."""
    return value if value is not None else ""


def null_if_empty(value: str | None) -> str | None:
    """The engine's "" (none) as the wire's null."""
    return value or None


def as_bytes(value: Any) -> bytes:
    """Decoded bytes fields may be memoryviews (zero-copy) or null: the engine keeps ``bytes``."""
    return bytes(value) if value is not None else b""


@dataclass(frozen=True, slots=True)
class SameAs:
    """``Field.absent``: a version without the field takes another wire field's value (JoinGroup v0's
    rebalance timeout is its session timeout)."""

    field: str


@dataclass(frozen=True, slots=True)
class Field:
    """How one wire field differs from the engine attribute of the same name.

    ``attr``: the engine attribute ("" = the engine has none: not written, not read). ``to_wire`` /
    ``from_wire``: value converters (applied outside ``struct``: convert, then map the struct on the
    way out; map, then convert on the way in). ``struct``: the map of a nested struct or struct array
    (null stays null on the way out; a null array reads as ``null``). ``const``: the wire value when
    the engine has none. ``read``: reads the engine value from the whole engine object (write only).
    ``param``: the value is an argument of the compiled writer, named after the field. ``absent``:
    the engine value when the decoded version lacks the field. ``null``: the engine value of a null
    struct array; ``collect``: the container a decoded one becomes. ``path``: ``from_wire`` takes the
    field's name as a second argument, to name it in a :class:`CodecError`.
    """

    attr: str | None = None
    to_wire: Callable[[Any], Any] | None = None
    from_wire: Callable[[Any], Any] | None = None
    struct: StructMap | None = None
    const: Any = _UNSET
    read: Callable[[Any], Any] | None = None
    param: bool = False
    absent: Any = _UNSET
    null: Any = ()
    collect: Callable[[Iterable[Any]], Any] = tuple
    path: bool = False


IGNORED = Field(attr="")
"""A wire field the engine has no use for (left at its spec default)."""

_PLAIN = Field()


@dataclass(frozen=True, eq=False)
class StructMap:
    """An engine type and the fields in which it differs from a wire struct.

    ``engine`` is a dataclass (read by attribute, built by keyword) or a tuple of names (a plain
    tuple row such as ``(member_id, assignment)``, read by index). ``extra``: engine fields the
    caller passes to the compiled reader (values the wire struct does not carry, e.g. the client
    host); ``fixed``: engine fields with a constant value when read from the wire.
    """

    engine: type | tuple[str, ...]
    fields: Mapping[str, Field] = dataclasses.field(default_factory=dict)
    extra: tuple[str, ...] = ()
    fixed: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    _plans: dict[tuple[str, int, int | None], Callable[..., Any]] = dataclasses.field(
        default_factory=dict, repr=False
    )

    def writer(self, struct: Any, version: int | None) -> Callable[..., Any]:
        """The compiled engine -> wire converter for ``struct`` (a spec struct) at ``version``."""
        return self._plan(_compile_writer, struct, version)

    def reader(self, struct: Any, version: int | None) -> Callable[..., Any]:
        """The compiled wire -> engine converter for ``struct`` at ``version``."""
        return self._plan(_compile_reader, struct, version)

    def _plan(self, compile_for: Callable[..., Any], struct: Any, version: int | None) -> Callable[..., Any]:
        key = (compile_for.__name__, id(struct), version)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = compile_for(self, struct, version)
        return plan


class _Plans(dict[int | None, Callable[..., Any]]):
    """Compiled converters by version, compiled on first use: a hit is one dict lookup."""

    def __init__(self, compile_for: Callable[[int | None], Callable[..., Any]]) -> None:
        super().__init__()
        self.compile_for = compile_for

    def __missing__(self, version: int | None) -> Callable[..., Any]:
        plan = self[version] = self.compile_for(version)
        return plan


class SpecMap:
    """A wire message class bound to its :class:`StructMap`: ``write[version]`` and
    ``read[version]`` are the compiled converters (``version=None``: every field, for single-version
    specs and record values)."""

    __slots__ = ("map", "read", "wire", "write")

    def __init__(self, wire: Any, struct_map: StructMap) -> None:
        self.wire = wire
        self.map = struct_map
        self.write = _Plans(lambda version: struct_map.writer(wire._struct, version))
        self.read = _Plans(lambda version: struct_map.reader(wire._struct, version))

    def to_wire(self, version: int | None = None) -> Callable[..., Any]:
        return self.write[version]

    def from_wire(self, version: int | None = None) -> Callable[..., Any]:
        return self.read[version]


def element(wire: Any, field: str) -> Any:
    """The spec struct of ``wire``'s struct (or struct array) field ``field`` (snake_case), for
    converting its entries one by one (``StructMap.writer``/``reader``)."""
    return _nested(wire._struct.fields[field])


# --- Compilation ------------------------------------------------------------------------------------


def _present(field: Any, version: int | None) -> bool:
    return version is None or bool(field.for_version_q(version))


def _null_below(field: Any, version: int | None) -> bool:
    """A string nullable only from a later version than ``version`` (written "" below it)."""
    return (
        version is not None
        and field.type_str == "string"
        and field._nullable_versions is not None
        and not field.nullable_for_version_q(version)
    )


def _nested(field: Any) -> Any:
    return field.array_of if field.is_struct_array() else field


def _init_names(engine: type | tuple[str, ...]) -> set[str]:
    """What the engine is built from (a reader's keywords)."""
    if isinstance(engine, tuple):
        return set(engine)
    return {f.name for f in dataclasses.fields(engine) if f.init}


def _readable(engine: type | tuple[str, ...], attr: str) -> bool:
    return attr in _init_names(engine) or (not isinstance(engine, tuple) and hasattr(engine, attr))


def _required(engine: type | tuple[str, ...]) -> set[str]:
    if isinstance(engine, tuple):
        return set(engine)
    missing = dataclasses.MISSING
    return {
        f.name
        for f in dataclasses.fields(engine)
        if f.init and f.default is missing and f.default_factory is missing
    }


def _source(smap: StructMap, rule: Field, field: Any, ns: dict[str, Any]) -> str:
    """The expression reading the engine value of wire ``field`` from ``o``."""
    if rule.param:
        return field.name
    if rule.read is not None:
        ns[f"R_{field.name}"] = rule.read
        return f"R_{field.name}(o)"
    attr = rule.attr or field.name
    if not _readable(smap.engine, attr):
        engine = smap.engine if isinstance(smap.engine, tuple) else smap.engine.__name__
        raise TypeError(f"{engine} has no {attr!r} for wire field {field._name}: map it")
    if isinstance(smap.engine, tuple):
        return f"o[{smap.engine.index(attr)}]"
    return f"o.{attr}"


def unsendable(api: str, version: int, field: str, since: int) -> CodecError:
    """The error for a request whose value needs a field its version lacks."""
    what = _UNSENDABLE.get(field, field)
    return CodecError(f"{api} v{version} cannot carry {what} (v{since}+)", field=field)


_UNSENDABLE: Mapping[str, str] = {
    "GroupInstanceId": "group.instance.id (static membership)",
    "StatesFilter": "a states filter",
    "TypesFilter": "a types filter",
}


def _given(value: Any) -> bool:
    """Whether an engine value says more than "not set" (None, or an empty collection)."""
    return value is not None and not (isinstance(value, list | tuple | set | frozenset) and not value)


_INLINE: Mapping[Callable[[Any], Any], str] = {
    empty_if_null: "(u{n} if (u{n} := {x}) is not None else '')",
    null_if_empty: "({x} or None)",
    as_bytes: "(b'' if (u{n} := {x}) is None else bytes(u{n}))",
}
"""The string and bytes converters every API uses, inlined: the compiled code then costs what a hand-written
``x if x is not None else ""`` did, with no call per field."""


def _call(fn: Callable[[Any], Any], name: str, expr: str, ns: dict[str, Any], n: int) -> str:
    inline = _INLINE.get(fn)
    if inline is not None:
        return inline.format(n=n, x=expr)
    ns[name] = fn
    return f"{name}({expr})"


def _write_expr(rule: Field, field: Any, version: int | None, src: str, ns: dict[str, Any], n: int) -> str:
    name = field.name
    expr = src
    if rule.to_wire is not None:
        expr = _call(rule.to_wire, f"T_{name}", expr, ns, n)
    if rule.struct is not None:
        ns[f"N_{name}"] = rule.struct.writer(_nested(field), version)
        each = f"[N_{name}(x) for x in v{n}]" if field.is_struct_array() else f"N_{name}(v{n})"
        expr = f"(None if (v{n} := {expr}) is None else {each})"
    if _null_below(field, version):
        expr = _call(empty_if_null, "", expr, ns, n)
    return expr


def _compile_writer(smap: StructMap, struct: Any, version: int | None) -> Callable[..., Any]:
    wire = struct.data_class
    ns: dict[str, Any] = {"W": wire, "_unsendable": unsendable, "_given": _given}
    # Only a top-level request field makes a value unsendable (nested classes carry no spec type).
    request = version is not None and getattr(wire, "_json", {}).get("type") == "request"
    params, checks, args = ["o"], [], []
    for n, field in enumerate(struct._fields):
        rule = smap.fields.get(field.name, _PLAIN)
        if rule.param:
            params.append(field.name)
        if rule.const is not _UNSET:
            if _present(field, version):
                ns[f"K_{field.name}"] = rule.const
                args.append(f"{field.name}=K_{field.name}")
            continue
        if rule.attr == "":
            continue
        src = _source(smap, rule, field, ns)
        if _present(field, version):
            args.append(f"{field.name}={_write_expr(rule, field, version, src, ns, n)}")
        elif request and not field._ignorable:
            api = wire.__name__.removesuffix("Request")
            checks.append(
                f"    if _given({src}):\n"
                f"        raise _unsendable({api!r}, {version}, {field._name!r}, {field.min_version})\n"
            )
    source = f"def write({', '.join(params)}):\n{''.join(checks)}    return W({', '.join(args)})\n"
    return _exec(source, ns, "write", wire, version)


def _read_expr(rule: Field, field: Any, version: int | None, ns: dict[str, Any], n: int) -> str:
    name = field.name
    expr = f"m.{name}"
    if rule.struct is not None:
        ns[f"N_{name}"] = rule.struct.reader(_nested(field), version)
        ns[f"C_{name}"] = rule.collect
        ns[f"Z_{name}"] = rule.null if field.is_struct_array() else None
        if field.is_struct_array():
            each = f"C_{name}(_each(N_{name}, v{n}, {field._name!r}))"
        else:
            each = f"_one(N_{name}, v{n}, {field._name!r})"
        expr = f"(Z_{name} if (v{n} := {expr}) is None else {each})"
    if _null_below(field, version):
        expr = _call(null_if_empty, "", expr, ns, n)
    if rule.path:
        ns[f"F_{name}"] = rule.from_wire
        expr = f"F_{name}({expr}, {field._name!r})"
    elif rule.from_wire is not None:
        expr = _call(rule.from_wire, f"F_{name}", expr, ns, n)
    return expr


def _absent_expr(rule: Field, field: Any, ns: dict[str, Any]) -> str | None:
    if isinstance(rule.absent, SameAs):
        return f"m.{rule.absent.field}"
    if rule.absent is not _UNSET:
        ns[f"A_{field.name}"] = rule.absent
        return f"A_{field.name}"
    return "None" if field._nullable_versions is not None else None


def _compile_reader(smap: StructMap, struct: Any, version: int | None) -> Callable[..., Any]:
    engine = smap.engine
    names = _init_names(engine)
    ns: dict[str, Any] = {"E": engine, "_each": read_each, "_one": _one}
    values: dict[str, str] = {}
    for n, field in enumerate(struct._fields):
        rule = smap.fields.get(field.name, _PLAIN)
        attr = rule.attr if rule.attr is not None else field.name
        if not attr or rule.const is not _UNSET or rule.param or rule.read or attr not in names:
            continue
        expr = _read_expr(rule, field, version, ns, n) if _present(field, version) else None
        expr = expr if expr is not None else _absent_expr(rule, field, ns)
        if expr is not None:
            values[attr] = expr
    for attr, value in smap.fixed.items():
        ns[f"X_{attr}"] = value
        values[attr] = f"X_{attr}"
    values.update({attr: attr for attr in smap.extra})
    missing = _required(engine) - values.keys()
    if missing:
        raise TypeError(f"{engine} fields {sorted(missing)} have no wire field at v{version}: map them")
    if isinstance(engine, tuple):
        body = f"({', '.join(values[a] for a in engine)},)"
    else:
        body = f"E({', '.join(_arguments(engine, values))})"
    source = f"def read({', '.join(('m', *smap.extra))}):\n    return {body}\n"
    return _exec(source, ns, "read", struct.data_class, version)


def _arguments(engine: type, values: dict[str, str]) -> list[str]:
    """Constructor arguments in the engine's field order: positional while every field has a value
    (a keyword call costs a slotted dataclass half as much again), keywords after the first gap."""
    out: list[str] = []
    positional = True
    for f in dataclasses.fields(engine):
        if f.name not in values:
            positional = False
        elif positional:
            out.append(values[f.name])
        else:
            out.append(f"{f.name}={values[f.name]}")
    return out


def _exec(source: str, ns: dict[str, Any], name: str, wire: Any, version: int | None) -> Callable[..., Any]:
    exec(compile(source, f"<spec_map {wire.__name__} v{version} {name}>", "exec"), ns)
    function: Callable[..., Any] = ns[name]
    function.__doc__ = source
    return function


# --- Decoding nested structs with their path --------------------------------------------------------


def read_each(read: Callable[[Any], Any], items: Sequence[Any], name: str) -> list[Any]:
    """``[read(x) for x in items]``, a CodecError naming ``name[i]`` as the start of its path.

    Readers are pure, so the entry at fault is found by reading again only once one failed: the
    common case stays a plain list comprehension."""
    try:
        return [read(item) for item in items]
    except CodecError as exc:
        error = exc
    for i, item in enumerate(items):
        try:
            read(item)
        except CodecError as exc:
            raise _within(exc, f"{name}[{i}]") from exc
    raise error


def _one(read: Callable[[Any], Any], item: Any, name: str) -> Any:
    try:
        return read(item)
    except CodecError as exc:
        raise _within(exc, name) from exc


def _within(exc: CodecError, path: str) -> CodecError:
    return CodecError(exc.reason, field=f"{path}.{exc.field}" if exc.field else path, offset=exc.offset)
