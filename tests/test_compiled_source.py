"""The compiled engine's copy of a module: which dataclasses get a native constructor, and that the
rewritten classes behave as the originals (same fields, equality, hash, repr, replace)."""

from __future__ import annotations

import dataclasses
import sys
import textwrap
import types
from collections.abc import Iterator
from typing import Any

import pytest

from connect_bridge.drills.compiled import compiled_modules
from connect_bridge.drills.compiled_source import base_names, native_dataclasses

SOURCE = textwrap.dedent(
    '''
    from __future__ import annotations
    import dataclasses
    from dataclasses import dataclass, field
    from typing import ClassVar

    EMPTY = ()

    @dataclass(frozen=True, slots=True)
    class Value:
        """A frozen value."""

        name: str
        tasks: tuple[int, ...] = EMPTY
        """Indices."""
        delay: int | None = None

    @dataclass(slots=True)
    class Mutable:
        kind: str
        at_ms: int | None = None

    @dataclass(frozen=True, eq=False)
    class Identity:
        token: object

    @dataclass(frozen=True)
    class WithFactory:
        items: tuple[int, ...] = field(default_factory=tuple)

    @dataclass
    class WithQualifiedFactory:
        items: tuple[int, ...] = dataclasses.field(default_factory=tuple)

    @dataclass
    class WithClassVar:
        LIMIT: ClassVar[int] = 3
        count: int = 0

    @dataclass(frozen=True, slots=True)
    class Base:
        group_id: str

    @dataclass(frozen=True, slots=True)
    class Derived(Base):
        member_id: str = ""

    @dataclass
    class PostInit:
        a: int
        def __post_init__(self) -> None:
            self.a += 1

    class NotADataclass:
        x: int = 1
    '''
)


def _load(text: str, name: str) -> dict[str, Any]:
    """Run ``text`` as a module registered under ``name`` (dataclasses looks its module up)."""
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(compile(text, f"<{name}>", "exec"), module.__dict__)
    return module.__dict__


@pytest.fixture(scope="module")
def both() -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    yield (
        _load(SOURCE, "original_under_test"),
        _load(native_dataclasses(SOURCE, base_names([SOURCE])), "copy_under_test"),
    )
    for name in ("original_under_test", "copy_under_test"):
        sys.modules.pop(name, None)


def _params(cls: type) -> Any:
    return cls.__dataclass_params__  # type: ignore[attr-defined]


def test_plain_dataclasses_get_their_own_init_and_frozen_ones_lose_only_the_guard(both: Any) -> None:
    original, copy = both
    assert not _params(copy["Value"]).init and not _params(copy["Value"]).frozen
    assert not _params(copy["Mutable"]).init
    assert "__init__" in copy["Value"].__dict__ and "__init__" in copy["Mutable"].__dict__
    for name in ("WithFactory", "WithQualifiedFactory", "WithClassVar", "PostInit"):
        assert _params(copy[name]).init, f"{name} keeps the generated __init__"
    assert _params(copy["Base"]).init, "a class others inherit from keeps the generated __init__"
    assert _params(copy["Derived"]).init and not _params(copy["Derived"]).frozen
    assert not _params(copy["Identity"]).frozen and not _params(copy["Identity"]).eq
    assert _params(original["Value"]).frozen


@pytest.mark.parametrize(
    ("name", "args", "kwargs"),
    [
        ("Value", ("c",), {}),
        ("Value", ("c", (1, 2)), {"delay": 5}),
        ("Value", (), {"name": "c", "tasks": (3,)}),
        ("Mutable", ("join",), {"at_ms": 7}),
        ("Derived", ("g",), {"member_id": "m"}),
        ("WithFactory", (), {}),
        ("WithClassVar", (), {"count": 2}),
        ("PostInit", (1,), {}),
    ],
)
def test_the_rewritten_classes_build_compare_hash_and_print_as_before(
    both: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    original, copy = both
    before, after = original[name](*args, **kwargs), copy[name](*args, **kwargs)
    assert repr(before) == repr(after)
    assert dataclasses.astuple(before) == dataclasses.astuple(after)
    assert [f.name for f in dataclasses.fields(before)] == [f.name for f in dataclasses.fields(after)]
    assert after == copy[name](*args, **kwargs)
    if original[name].__hash__ is not None:
        assert hash(after) == hash(copy[name](*args, **kwargs))
    else:
        assert copy[name].__hash__ is None
    assert repr(dataclasses.replace(after)) == repr(dataclasses.replace(before))


def test_a_missing_argument_is_refused_as_before(both: Any) -> None:
    original, copy = both
    for namespace in (original, copy):
        with pytest.raises(TypeError):
            namespace["Value"]()


def test_every_compiled_module_still_parses_after_the_rewrite() -> None:
    from connect_bridge.drills.compiled import _source_root

    root = _source_root()
    sources = {rel: (root / rel).read_text() for rel in compiled_modules()}
    inherited = base_names(list(sources.values()))
    rewritten = 0
    for rel, text in sources.items():
        copy = native_dataclasses(text, inherited)
        compile(copy, rel, "exec")
        rewritten += copy != text
    assert rewritten > 10, "the engine's hot value classes are rewritten"
