"""Whether the ``spark`` extra is installed, asked before ``analyze`` or ``drill fleet`` start.

The core commands (``serve``, ``codec``, ``describe``, ``drill run``) need none of PySpark, pandas,
pyarrow or matplotlib, so installing the package leaves them out and its ``spark`` extra brings
them (pyproject.toml). The package is not on PyPI: it is installed from a clone (``pip install -e
'.[spark]'``) or from a wheel built from one, so the message names both. Without them the Spark
commands must say so in one line instead of failing with an ImportError deep in the pipeline; this
module only looks for the modules (``importlib.util.find_spec``), it imports none of them.
"""

from __future__ import annotations

import importlib.util
import os
import shutil

INSTALL = (
    "install the spark extra (in a clone: pip install -e '.[spark]'; a wheel: pip install 'WHEEL[spark]')"
)
SPARK_MODULES: tuple[tuple[str, str], ...] = (
    ("pyspark", "PySpark"),
    ("pandas", "pandas"),
    ("pyarrow", "pyarrow"),
    ("matplotlib", "matplotlib"),
)
"""(module, name to show) of what the pipeline imports, in the order a message names them."""


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken or blocked package is as good as none
        return False


def spark_missing(command: str) -> str | None:
    """The one-line reason ``command`` cannot run here (what to install), or ``None``."""
    missing = [shown for module, shown in SPARK_MODULES if not _installed(module)]
    if missing:
        return f"{command} needs {', '.join(missing)}: {INSTALL}"
    if not os.environ.get("JAVA_HOME") and shutil.which("java") is None:
        return f"{command} needs Java 17 or later for Spark: install a JDK, put java on PATH or set JAVA_HOME"
    return None
