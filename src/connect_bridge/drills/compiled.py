"""The drill engine compiled with mypyc, for fleets: the same code, several times faster.

A drill is a pure function of its seed, and almost all of its time is the simulation (the bridge's
engine under ``state/``, the simulated workers under ``workers/``, the simulator under ``drills/``),
spread over hundreds of small functions: no hot spot to rewrite, but exactly the kind of typed,
object-heavy code mypyc (mypy's compiler to C extensions) speeds up. The package is copied under
another name, :data:`ENGINE_PACKAGE`, so the compiled modules never meet the interpreted ones in a
process (a compiled class and its Python twin would be two different classes); the modules of
:data:`COMPILED` are compiled in the copy, the rest of the copy stays Python.

Built on first use into ``~/.cache/connect-bridge/engine/<digest>/`` (the digest covers every
source file of the package, Python's version and mypy's), under a lock, so a fleet's executors on
this machine (``local[N]`` or a standalone cluster on loopback) find it; a build takes one to two
minutes on two cores. ``tests/test_compiled_engine.py`` proves that it gives the same drills as the
interpreted engine. Where it cannot be built (no mypy, no C compiler, no Python headers) the caller
runs the Python engine and says so (:func:`engine_or_reason`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib
import importlib.metadata
import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from connect_bridge.drills.compiled_source import base_names, native_dataclasses

PACKAGE = "connect_bridge"
ENGINE_PACKAGE = "connect_bridge_compiled"
"""The name the compiled copy is imported under."""

COMPILED = (
    "state",
    "workers",
    "drills/sim.py",
    "drills/sim_bridge.py",
    "drills/sim_worker.py",
    "drills/events.py",
    "codecs/ids.py",
    "codecs/connect_protocol.py",
)
"""What mypyc compiles, relative to the package: a folder stands for every module in it."""

LEFT_AS_PYTHON = {
    "state/errors.py": "an exception class inheriting RuntimeError, which mypyc cannot compile",
    "workers/errors.py": "an exception class inheriting RuntimeError, which mypyc cannot compile",
    "state/result.py": "a generic dataclass with slots, which mypyc cannot compile",
    "workers/live_legacy.py": "a live worker with threads and sockets, never part of a drill",
    "workers/live_new.py": "a live worker with threads and sockets, never part of a drill",
}
"""Modules under :data:`COMPILED` that stay Python, and why."""

BUILD_TIMEOUT_S = 1200
KEPT_BUILDS = 3
"""Builds kept in the cache (the newest; about 20 MB each): other checkouts or branches of the
project may still use an older one."""


class EngineBuildError(RuntimeError):
    """The compiled engine could not be built here; the message names the cause."""


@dataclass(frozen=True)
class DrillFunctions:
    """One engine's entry points: scenario from seed, drill run, checker."""

    random_scenario: Callable[..., Any]
    run_scenario: Callable[..., Any]
    check: Callable[..., Any]


def _source_root() -> Path:
    return Path(__file__).resolve().parent.parent


def cache_root() -> Path:
    return Path.home() / ".cache" / "connect-bridge" / "engine"


def compiled_modules(root: Path | None = None) -> list[str]:
    """The package-relative paths mypyc compiles (sorted), from :data:`COMPILED` minus
    :data:`LEFT_AS_PYTHON` and package ``__init__`` files."""
    root = root or _source_root()
    out: set[str] = set()
    for entry in COMPILED:
        path = root / entry
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for file in files:
            rel = file.relative_to(root).as_posix()
            if file.name != "__init__.py" and rel not in LEFT_AS_PYTHON:
                out.add(rel)
    return sorted(out)


def engine_digest(root: Path | None = None) -> str:
    """What the build depends on: every file of the package (a module left as Python is still
    imported by compiled ones), the module list, Python's version and platform, mypy's version."""
    root = root or _source_root()
    h = hashlib.sha256()
    h.update(repr((COMPILED, sorted(LEFT_AS_PYTHON), sys.version, platform.machine())).encode())
    h.update(_mypy_version().encode())
    for file in sorted(root.rglob("*")):
        if file.is_file() and "__pycache__" not in file.parts and file.suffix not in {".so", ".pyc", ".c"}:
            h.update(file.relative_to(root).as_posix().encode())
            h.update(file.read_bytes())
    return h.hexdigest()


def _mypy_version() -> str:
    try:
        return importlib.metadata.version("mypy")
    except importlib.metadata.PackageNotFoundError:
        return ""


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _home() -> Path:
    return cache_root() / engine_digest()[:16]


def is_built() -> bool:
    """Whether this source tree's compiled engine is already in the cache."""
    return (_home() / "built").is_file()


def ensure_engine(*, quiet: bool = True) -> Path:
    """The directory to put on ``sys.path`` for :data:`ENGINE_PACKAGE`: built first (under a lock,
    so concurrent callers build once) when this source tree has none yet."""
    if not _mypy_version():
        raise EngineBuildError("mypy (which carries mypyc) is not installed (the 'spark' extra has it)")
    home = _home()
    if (home / "built").is_file():
        return home
    with _lock(cache_root() / "build.lock"):
        if not (home / "built").is_file():
            _build(home, quiet=quiet)
    return home


_IMPORT_NAME = re.compile(rf"\b{PACKAGE}\b")


def _copy_renamed(source: Path, target: Path) -> None:
    """The package under :data:`ENGINE_PACKAGE`: every module's own name and imports renamed, and the
    dataclasses of the modules mypyc compiles given native constructors (:mod:`compiled_source`)."""
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyc", "*.c"))
    native = set(compiled_modules(source))
    inherited = base_names([file.read_text() for file in target.rglob("*.py")])
    for file in target.rglob("*.py"):
        text = _IMPORT_NAME.sub(ENGINE_PACKAGE, file.read_text())
        if file.relative_to(target).as_posix() in native:
            text = native_dataclasses(text, inherited)
        file.write_text(text)


_BUILD_SCRIPT = """
import sys
from setuptools import setup
from mypyc.build import mypycify
modules = sys.argv[1:]
setup(
    name="connect-bridge-compiled-engine",
    ext_modules=mypycify(
        ["--ignore-missing-imports", "--follow-imports=silent", *modules], opt_level="3", multi_file=True
    ),
    script_args=["build_ext", "--inplace", "--parallel", "2"],
)
"""


def _build(home: Path, *, quiet: bool) -> None:
    """Copy, compile, and move into place only when complete (a reader never sees half a build).
    The compiler's output is kept in ``last-build.log`` beside the builds."""
    work = home.with_name(f"{home.name}.building-{os.getpid()}")
    log = cache_root() / "last-build.log"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        _copy_renamed(_source_root(), work / ENGINE_PACKAGE)
        modules = [f"{ENGINE_PACKAGE}/{rel}" for rel in compiled_modules()]
        if not quiet:
            print(f"building the compiled drill engine ({len(modules)} modules, mypyc)", file=sys.stderr)
        try:
            done = subprocess.run(
                [sys.executable, "-c", _BUILD_SCRIPT, *modules],
                cwd=work,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=BUILD_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise EngineBuildError(f"the mypyc build took over {BUILD_TIMEOUT_S} s") from exc
        log.write_text(done.stdout + done.stderr)
        if done.returncode != 0:
            errors = [line for line in (done.stdout + done.stderr).splitlines() if "error" in line.lower()]
            reason = errors[0] if errors else f"exit status {done.returncode}"
            raise EngineBuildError(f"the mypyc build failed: {reason} (log: {log})")
        shutil.rmtree(work / "build", ignore_errors=True)
        (work / "built").write_text(engine_digest() + "\n")
        shutil.rmtree(home, ignore_errors=True)
        work.rename(home)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _prune(keep=home)


def _prune(keep: Path) -> None:
    """Remove all but the :data:`KEPT_BUILDS` newest builds (``keep`` always stays)."""
    builds = sorted(
        (d for d in cache_root().iterdir() if (d / "built").is_file() and d != keep),
        key=lambda d: (d / "built").stat().st_mtime,
        reverse=True,
    )
    for old in builds[KEPT_BUILDS - 1 :]:
        shutil.rmtree(old, ignore_errors=True)


def engine_or_reason(*, quiet: bool = True) -> tuple[Path | None, str]:
    """The compiled engine's directory, or ``None`` and one line saying why the Python engine
    runs instead."""
    try:
        return ensure_engine(quiet=quiet), "compiled"
    except (EngineBuildError, OSError) as exc:
        return None, f"python ({exc})"


def drill_functions(engine: str | Path | None) -> DrillFunctions:
    """The entry points of the compiled engine at ``engine`` (a directory from
    :func:`ensure_engine`), or of the interpreted package when ``None``."""
    package = PACKAGE
    if engine is not None:
        path = str(engine)
        if path not in sys.path:
            sys.path.insert(0, path)
        package = ENGINE_PACKAGE
    generate = importlib.import_module(f"{package}.drills.generate")
    sim = importlib.import_module(f"{package}.drills.sim")
    checker = importlib.import_module(f"{package}.drills.checker")
    return DrillFunctions(generate.random_scenario, sim.run_scenario, checker.check)


def is_compiled(functions: DrillFunctions) -> bool:
    """Whether ``functions`` run compiled code (the simulator's module is an extension module)."""
    module = sys.modules[functions.run_scenario.__module__]
    return not str(getattr(module, "__file__", "")).endswith(".py")


__all__ = [
    "COMPILED",
    "ENGINE_PACKAGE",
    "LEFT_AS_PYTHON",
    "DrillFunctions",
    "EngineBuildError",
    "compiled_modules",
    "drill_functions",
    "engine_digest",
    "engine_or_reason",
    "ensure_engine",
    "is_built",
    "is_compiled",
]
