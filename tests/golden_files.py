"""Golden files the tests keep in git, each rebuilt from its source of truth.

=========================================================  ==========================================
file                                                       source of truth
=========================================================  ==========================================
``tests/data/connect-embedded-protocol.json``              Apache Kafka 4.3.1's Connect runtime, run
                                                           by ``tests/connect_vectors.py`` (Java)
``jvm/connect-bridge-worker/src/test/resources/``          the Python codec, by
``connect-group-vectors.json``                             ``tests/gen_java_vectors.py``
=========================================================  ==========================================

A golden file is current when rebuilding it gives its text byte for byte; ``tests/test_java_vectors.py``
checks both. ``python tests/golden_files.py`` rewrites them (``--check`` only says which are stale).
Standard library only, plus the two builders.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class GoldenFile:
    """A checked-in file and the function that builds its text from the source of truth."""

    path: Path
    build: Callable[[], str]
    regenerate: str
    """The command that rewrites the file, for the stale file's message."""

    def stale_message(self) -> str | None:
        """None when the file is current, else one line saying which file and how to rewrite it."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            text = None
        if text == self.build():
            return None
        return f"{self.path.relative_to(REPO)} is not current: run {self.regenerate}"

    def write(self) -> None:
        self.path.write_text(self.build(), encoding="utf-8")


def golden_files() -> tuple[GoldenFile, ...]:
    import connect_vectors
    import gen_java_vectors

    return (connect_vectors.GOLDEN, gen_java_vectors.GOLDEN)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report the stale files (exit 1)")
    args = parser.parse_args(argv)
    stale = 0
    for golden in golden_files():
        message = golden.stale_message()
        if message is None:
            print(f"current: {golden.path.relative_to(REPO)}")
            continue
        stale += 1
        if args.check:
            print(message)
        else:
            golden.write()
            print(f"wrote {golden.path.relative_to(REPO)}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
