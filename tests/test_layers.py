"""The layer rules of docs/architecture.md ("Layers"), read from the source's imports.

Each sub-package of ``connect_bridge`` imports only from its own layer and the layers before it
(``codecs`` ← ``state`` ← ``wire`` ← ``bridge`` ← ``workers`` ← ``drills`` ← ``pipeline`` ← the CLI); the
utilities import nothing of the project; ``state`` imports nothing that does I/O or reads a clock
or a random source. Inside ``bridge``, each part (a sub-package or a top-level module) imports only
the parts before it in ``BRIDGE_PARTS`` (docs/architecture.md, "Inside bridge"), and inside
``state`` each part only the parts before it in ``STATE_PARTS`` ("Inside state"). Every import
counts, a lazy one inside a function too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "connect_bridge"
LAYERS = ("codecs", "state", "wire", "bridge", "workers", "drills", "pipeline", "cli")
"""In import order: a layer may import from the layers before it, never after."""
UTILITIES = frozenset({"logs", "progress", "out_dir"})
"""Top-level modules any layer but ``state`` and ``codecs`` may use; they import nothing of the project."""
STATE_FORBIDDEN = frozenset({"asyncio", "socket", "threading", "time", "random", "selectors", "ssl"})
"""What would make the engine do I/O, read the clock or draw random numbers."""
BRIDGE_PARTS = (
    "metrics",
    "startup",
    "validation",
    "describe_view",
    "security",
    "stores",
    "coordination",
    "upstream",
    "edge",
    "ha",
    "adoption",
    "server_options",
    "settings",
    "proxy",
    "admin",
    "server",
    "describe",
    "probe",
    "app",
)
"""The parts of ``bridge`` from the bottom up: each may import only the parts before it, so no
sub-package imports back up into a module that imports it."""
STATE_PARTS = (
    "errors",
    "timers",
    "records",
    "result",
    "limits",
    "partitioning",
    "model",
    "holds",
    "api",
    "assignors",
    "config",
    "ownership",
    "classic",
    "connect",
    "migration",
    "adoption",
    "empty_groups",
    "record_codec",
    "coordinator",
)
"""The parts of ``state`` from the bottom up (docs/architecture.md, "Inside state"), kept like
``BRIDGE_PARTS``: the classic group below the connect group (whose legacy members speak the classic
API), conversions between the two above both, adoption above conversions, the coordinator on top."""


def layer_of(path: Path) -> str:
    """``codecs`` … ``pipeline`` for a sub-package's module, ``cli`` for ``cli*.py``, else its stem."""
    relative = path.relative_to(PACKAGE)
    if len(relative.parts) > 1:
        return relative.parts[0]
    return "cli" if relative.stem.startswith("cli") else relative.stem


def imports(path: Path, source: str) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in the module's source."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: relative import"
            module = node.module or ""
            if module == "connect_bridge":  # from connect_bridge import state
                found += [(node.lineno, f"connect_bridge.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, module))
    return found


def project_layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "connect_bridge" or len(parts) < 2 or parts[1].startswith("__"):
        return None  # not the project's, or the package's own attributes (__version__)
    return "cli" if parts[1].startswith("cli") else parts[1]


def violations(path: Path, source: str | None = None) -> list[str]:
    """What in one module breaks the rules, one line each (``source``: its text, default the file's)."""
    layer = layer_of(path)
    out = []
    for line, module in imports(path, path.read_text(encoding="utf-8") if source is None else source):
        where = f"{path.relative_to(PACKAGE.parent)}:{line}"
        target = project_layer(module)
        if layer == "state" and module.split(".")[0] in STATE_FORBIDDEN:
            out.append(f"{where}: state imports {module}")
        if target is None or target == layer:
            continue
        if layer in UTILITIES:
            out.append(f"{where}: the utility {layer} imports {module}")
        elif target in UTILITIES:
            if layer in ("codecs", "state"):
                out.append(f"{where}: {layer} imports the utility {module}")
        elif target in LAYERS and layer in LAYERS and LAYERS.index(target) > LAYERS.index(layer):
            out.append(f"{where}: {layer} imports {module}, a later layer")
        elif target not in LAYERS and target not in UTILITIES and target != "docs":
            out.append(f"{where}: {module} is in no layer of docs/architecture.md")
    return out


def part_of(path: Path, package: str) -> str | None:
    """The part of ``bridge`` or ``state`` a module belongs to: its sub-package, or its own stem at
    the top."""
    relative = path.relative_to(PACKAGE)
    if relative.parts[0] != package or (relative.name == "__init__.py" and len(relative.parts) == 2):
        return None
    return relative.parts[1] if len(relative.parts) > 2 else relative.stem


def bridge_part(path: Path) -> str | None:
    """The part of ``bridge`` a module belongs to."""
    return part_of(path, "bridge")


def from_package_imports(source: str, package: str) -> list[tuple[int, str]]:
    """``from connect_bridge.bridge import app`` as (line, ``connect_bridge.bridge.app``)."""
    return [
        (node.lineno, f"connect_bridge.{package}.{alias.name}")
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom) and node.module == f"connect_bridge.{package}"
        for alias in node.names
    ]


def part_violations(path: Path, package: str, order: tuple[str, ...], source: str | None = None) -> list[str]:
    """Imports of one module of ``package`` that reach a part of it not before its own in ``order``."""
    part = part_of(path, package)
    if part is None:
        return []
    listing = f"{package.upper()}_PARTS"
    out = []
    text = path.read_text(encoding="utf-8") if source is None else source
    for line, module in imports(path, text) + from_package_imports(text, package):
        names = module.split(".")
        if names[:2] != ["connect_bridge", package] or len(names) < 3 or names[2] == part:
            continue
        where = f"{path.relative_to(PACKAGE.parent)}:{line}"
        if part not in order:
            out.append(f"{where}: {package} part {part} is not in {listing}")
        elif names[2] not in order:
            out.append(f"{where}: {module} is in no part of {listing}")
        elif order.index(names[2]) > order.index(part):
            out.append(f"{where}: {package} part {part} imports {module}, a part above it")
    return out


def bridge_violations(path: Path, source: str | None = None) -> list[str]:
    """Imports of one ``bridge`` module that reach a part of ``bridge`` not before its own."""
    return part_violations(path, "bridge", BRIDGE_PARTS, source)


def state_violations(path: Path, source: str | None = None) -> list[str]:
    """Imports of one ``state`` module that reach a part of ``state`` not before its own."""
    return part_violations(path, "state", STATE_PARTS, source)


def test_bridge_parts_import_downwards() -> None:
    modules = sorted((PACKAGE / "bridge").rglob("*.py"))
    assert {bridge_part(m) for m in modules} - {None} == set(BRIDGE_PARTS)
    found = [v for m in modules for v in bridge_violations(m)]
    assert found == []


def test_state_parts_import_downwards() -> None:
    modules = sorted((PACKAGE / "state").rglob("*.py"))
    assert {part_of(m, "state") for m in modules} - {None} == set(STATE_PARTS)
    found = [v for m in modules for v in state_violations(m)]
    assert found == []


def test_every_module_keeps_the_layer_rules() -> None:
    modules = sorted(PACKAGE.rglob("*.py"))
    assert {layer_of(m) for m in modules} >= set(LAYERS)
    found = [v for m in modules for v in violations(m)]
    assert found == []


@pytest.mark.parametrize(
    ("relative", "source", "problem"),
    [
        ("state/x.py", "import time\n", "state imports time"),
        ("state/x.py", "from connect_bridge.bridge import server\n", "state imports connect_bridge.bridge"),
        ("codecs/x.py", "from connect_bridge import state\n", "codecs imports connect_bridge.state"),
        ("drills/x.py", "def f():\n    import connect_bridge.pipeline.fleet\n", "a later layer"),
        ("logs.py", "import connect_bridge.state\n", "the utility logs imports"),
    ],
)
def test_a_breach_is_found(relative: str, source: str, problem: str) -> None:
    """The check itself: each kind of breach, as the source of a module of that layer, is reported."""
    found = violations(PACKAGE / relative, source)
    assert any(problem in v for v in found), found


@pytest.mark.parametrize(
    ("relative", "source", "problem"),
    [
        ("bridge/security/x.py", "from connect_bridge.bridge.edge import accept\n", "a part above it"),
        ("bridge/stores/x.py", "def f():\n    from connect_bridge.bridge.server import run\n", "above"),
        ("bridge/security/x.py", "from connect_bridge.bridge import app\n", "a part above it"),
        ("bridge/edge/x.py", "import connect_bridge.bridge.proxy.relay\n", "a part above it"),
        ("bridge/newpart/x.py", "from connect_bridge.bridge.metrics import Metrics\n", "not in BRIDGE_PARTS"),
    ],
)
def test_a_bridge_breach_is_found(relative: str, source: str, problem: str) -> None:
    """The check itself: an import up the parts of ``bridge`` is reported, as is an unlisted part."""
    found = bridge_violations(PACKAGE / relative, source)
    assert any(problem in v for v in found), found


@pytest.mark.parametrize(
    ("relative", "source", "problem"),
    [
        ("state/classic/x.py", "from connect_bridge.state.connect import group\n", "a part above it"),
        ("state/model.py", "def f():\n    from connect_bridge.state.coordinator import replay\n", "above"),
        ("state/connect/x.py", "from connect_bridge.state import migration\n", "a part above it"),
        ("state/migration/x.py", "import connect_bridge.state.adoption.handback\n", "a part above it"),
        ("state/config.py", "from connect_bridge.state.classic import api\n", "a part above it"),
        ("state/newpart/x.py", "from connect_bridge.state.model import GroupId\n", "not in STATE_PARTS"),
    ],
)
def test_a_state_breach_is_found(relative: str, source: str, problem: str) -> None:
    """The check itself: an import up the parts of ``state`` is reported, as is an unlisted part."""
    found = state_violations(PACKAGE / relative, source)
    assert any(problem in v for v in found), found
