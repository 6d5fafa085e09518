"""How the compiled drill engine's copy of a module differs from the module: its dataclasses.

mypyc compiles a dataclass into a native class but keeps the methods the ``dataclasses`` module
generates (``__init__``, ``__eq__``, ``__hash__`` ...) as interpreted Python. Building a value then
costs an interpreted call, and for a frozen dataclass one ``object.__setattr__`` per field: in a
compiled drill these constructors were the largest piece of interpreted time. So, in the copy only,
and only in modules mypyc compiles (:func:`native_dataclasses`):

* **frozen** dataclasses lose the runtime guard against assignment and keep their hash
  (``frozen=True`` becomes ``unsafe_hash=True``, which generates the same ``__hash__``). The guard
  is not needed there: mypy, which type-checks the copy before compiling it, refuses any assignment
  to a frozen field in the source, and the interpreted package (which every test runs) keeps it.
* **plain** dataclasses (no base class, none inheriting from them, no ``field(...)``, no
  ``ClassVar``/``InitVar``/``KW_ONLY``, no ``__post_init__``, no ``kw_only``, no ``__init__`` of
  their own) get an explicit ``__init__``
  with the generated one's signature (the same names, order, annotations and default expressions)
  and ``init=False``, so mypyc compiles the constructor natively.

Equality, hashing, ``repr``, ``dataclasses.replace`` and ``fields`` behave as before: only who
writes ``__init__`` changes. ``tests/test_compiled_engine.py`` runs the same drills on both engines
and requires the same events.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

__all__ = ["base_names", "native_dataclasses"]

_NOT_FIELDS = ("ClassVar", "InitVar", "KW_ONLY")
"""Annotations that make a class line something other than a plain field (the class is left alone)."""


@dataclass(frozen=True, slots=True)
class _Edit:
    """Replace source lines ``first``..``last`` (1-based, inclusive) with ``text``."""

    first: int
    last: int
    text: list[str]


def base_names(sources: list[str]) -> frozenset[str]:
    """The names classes in ``sources`` inherit from. A class by such a name keeps its generated
    ``__init__``: mypyc miscompiles a generated ``__init__`` that calls an explicit one of a base."""
    return frozenset(
        base.id
        for source in sources
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ClassDef)
        for base in node.bases
        if isinstance(base, ast.Name)
    )


def native_dataclasses(source: str, inherited: frozenset[str] = frozenset()) -> str:
    """``source`` with its top-level dataclasses rewritten as the module docstring says; a class
    named in ``inherited`` (see :func:`base_names`) keeps its generated ``__init__``."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    edits: list[_Edit] = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            edits.extend(_class_edits(node, source, inherited))
    for edit in sorted(edits, key=lambda e: e.first, reverse=True):
        lines[edit.first - 1 : edit.last] = edit.text
    return "".join(lines)


def _dataclass_decorator(node: ast.ClassDef) -> ast.expr | None:
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Name) and target.id == "dataclass":
            return decorator
    return None


def _class_edits(node: ast.ClassDef, source: str, inherited: frozenset[str]) -> list[_Edit]:
    decorator = _dataclass_decorator(node)
    if decorator is None:
        return []
    options = (
        {kw.arg: kw.value for kw in decorator.keywords if kw.arg} if isinstance(decorator, ast.Call) else {}
    )
    constant = {name: value.value for name, value in options.items() if isinstance(value, ast.Constant)}
    fields = _plain_fields(node, source)
    rewrite_init = (
        fields is not None
        and not node.bases
        and node.name not in inherited
        and not {"init", "kw_only"} & options.keys()
    )
    unfreeze = constant.get("frozen") is True
    if not (rewrite_init or unfreeze):
        return []
    keywords = [f"{name}={ast.get_source_segment(source, value)}" for name, value in options.items()]
    if unfreeze:
        keywords.remove("frozen=True")
        if constant.get("eq", True) is not False:
            keywords.append("unsafe_hash=True")
    if rewrite_init:
        keywords.append("init=False")
    line = f"{' ' * node.col_offset}@dataclass({', '.join(keywords)})\n"
    edits = [_Edit(decorator.lineno, decorator.end_lineno or decorator.lineno, [line])]
    if rewrite_init and fields is not None:
        body_indent = " " * node.body[0].col_offset
        end = node.end_lineno or node.lineno
        edits.append(_Edit(end + 1, end, _init_lines(fields, body_indent)))
    return edits


def _plain_fields(node: ast.ClassDef, source: str) -> list[tuple[str, str, str | None]] | None:
    """(name, annotation, default) of each field, or ``None`` when the class is not plain."""
    fields: list[tuple[str, str, str | None]] = []
    for statement in node.body:
        if isinstance(statement, ast.FunctionDef) and statement.name in ("__init__", "__post_init__"):
            return None
        if not isinstance(statement, ast.AnnAssign):
            continue
        if not isinstance(statement.target, ast.Name):
            return None
        annotation = ast.get_source_segment(source, statement.annotation) or ""
        if any(word in annotation for word in _NOT_FIELDS):
            return None
        value = statement.value
        # field(...) or dataclasses.field(...): defaults and flags only the generated __init__ knows
        if isinstance(value, ast.Call) and _called_name(value.func) == "field":
            return None
        default = None if value is None else ast.get_source_segment(source, value)
        fields.append((statement.target.id, annotation, default))
    return fields


def _called_name(func: ast.expr) -> str | None:
    """``f`` of a call ``f(...)`` or ``module.f(...)``."""
    if isinstance(func, ast.Name):
        return func.id
    return func.attr if isinstance(func, ast.Attribute) else None


def _init_lines(fields: list[tuple[str, str, str | None]], indent: str) -> list[str]:
    """The generated ``__init__``, as source lines indented for the class body."""
    parameters = ", ".join(
        f"{name}: {annotation}" + ("" if default is None else f" = {default}")
        for name, annotation, default in fields
    )
    body = [f"{indent}    self.{name} = {name}\n" for name, _, _ in fields] or [f"{indent}    pass\n"]
    return ["\n", f"{indent}def __init__(self, {parameters}) -> None:\n", *body]
