"""The worker logic's error types, in a module of their own that the compiled engine
(``drills/compiled.py``) leaves as Python: mypyc cannot compile a class that inherits
``RuntimeError``."""

from __future__ import annotations


class LeaderStateMissing(RuntimeError):
    """A worker named Connect leader without leader state (Java: NPE in ``ownerUrl``)."""
