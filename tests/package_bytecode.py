"""The package's bytecode, compiled once per test session for the processes the tests start.

With ``PYTHONDONTWRITEBYTECODE`` set (the environment the suite was timed in sets it), Python never
writes the ``.pyc`` files of the checkout's modules (``src/connect_bridge``, installed editable), so
every ``connect-bridge`` process a test starts (a bridge, the CLI, a fleet or analyze run) compiled
the package's ~190 modules from source again: a bridge took 0.58 s from spawn to listening, 0.41 s
with them compiled (medians of 6-8 starts). The session writes them once, where Python itself would
have (the ``__pycache__`` directories next to the sources, which ``.gitignore`` leaves out), and the
processes read them there; the venv's packages have theirs from ``pip install`` already.

A cached file is used only while it matches its source (Python compares the source's modification
time and size, as for any ``.pyc``): a module edited during the run is compiled afresh, as before.
(``PYTHONPYCACHEPREFIX`` would keep them out of the checkout, but a process with it set looks for
every module's bytecode there, the standard library's too, and compiled those instead: slower.)
"""

from __future__ import annotations

import compileall
import sys
from pathlib import Path


def compile_package(package_dir: Path) -> bool:
    """Compile ``package_dir``'s modules into their ``__pycache__`` when this interpreter does not
    write bytecode itself (``sys.dont_write_bytecode``); whether it did."""
    if not sys.dont_write_bytecode:
        return False  # every process writes and reuses them anyway
    return bool(compileall.compile_dir(package_dir, quiet=1))
