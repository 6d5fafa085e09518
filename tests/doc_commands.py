"""Running the commands of a Markdown document as tests (``docs/operator-guide.md``, ``README.md``).

What the two doc tests share: the fenced blocks of a document, the substitution of its placeholders
(host names, ports, paths) by the test's values, running a block with bash the way an operator
would, starting the ``connect-bridge serve`` a block names as a process, and new-protocol workers
(``workers/live_new.py``) that join the bridge so ``describe`` and ``/metrics`` have a group to show.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import select
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import pytest

from connect_bridge.workers.live_new import LiveNewWorker
from polling import wait_until

REPO = Path(__file__).resolve().parents[1]
FENCE = re.compile(
    r"^(?P<indent> *)```(?P<lang>[a-z]*)(?: (?P<tag>[a-z-]+))?\n(?P<body>.*?)^(?P=indent)```$", re.M | re.S
)
"""A fenced block; ``tag`` is an optional second word of the info string (```sh adoption): the
blocks that need a setting of their own (a group to adopt, a fleet of bridges) are run apart."""
LISTENING = "connect-bridge listening on "
START_TIMEOUT_S = 30.0
ENV = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
"""``connect-bridge`` from the interpreter running the tests, even without an activated venv."""


@dataclass(frozen=True)
class Block:
    lang: str
    body: str
    line: int
    tag: str = ""


def fenced_blocks(text: str) -> list[Block]:
    """The fenced blocks, dedented by their fence's indentation (blocks inside numbered steps)."""
    blocks = []
    for match in FENCE.finditer(text):
        indent = len(match["indent"])
        lines = match["body"].splitlines(True)
        body = "".join(line[indent:] if line[:indent].isspace() else line for line in lines)
        blocks.append(Block(match["lang"], body, text.count("\n", 0, match.start()) + 1, match["tag"] or ""))
    return blocks


def count_fences(text: str) -> int:
    """Lines opening or closing a fence: twice the blocks, unless a fence is odd or unclosed."""
    return sum(line.strip().startswith("```") for line in text.splitlines())


def substitute(body: str, table: list[tuple[str, str]], used: set[str]) -> str:
    """``body`` with each table entry replaced in order; the entries that occurred go to ``used``."""
    for old, new in table:
        if old in body:
            used.add(old)
            body = body.replace(old, new)
    return body


def run_sh(body: str, cwd: Path = REPO, timeout_s: float = 300) -> str:
    """Run ``body`` with ``bash -euo pipefail``; its stdout, or a failure showing both streams."""
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", body],
        cwd=cwd,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert done.returncode == 0, (
        f"exit {done.returncode}\n{body}\nstdout: {done.stdout[-3000:]}\nstderr: {done.stderr[-3000:]}"
    )
    return done.stdout


def last_json(out: str) -> Any:
    """The last JSON document of ``out`` that runs to its end (after a command's human lines)."""
    starts = [0] + [m.end() for m in re.finditer(r"\n", out)]
    for start in reversed(starts):
        try:
            value, end = json.JSONDecoder().raw_decode(out, start)
        except ValueError:
            continue
        if not out[end:].strip():
            return value
    raise AssertionError(f"no JSON document at the end of: {out!r}")


class Serve:
    """A ``connect-bridge serve`` command of a document, running; stderr (its log) goes to ``log``."""

    def __init__(self, command: str, log: Path, cwd: Path = REPO) -> None:
        self.log_path = log
        self._log: TextIO = log.open("a")
        self.process = subprocess.Popen(
            ["bash", "-c", "exec " + command.strip()],
            cwd=cwd,
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], START_TIMEOUT_S)
        if not ready:
            self.process.kill()
        line = self.process.stdout.readline() if ready else "(nothing in time)"
        assert line.startswith(LISTENING), (command, line, log.read_text()[-3000:])
        self.address = line[len(LISTENING) :].strip()

    def stop(self) -> int:
        """SIGTERM; serve's exit code (0 for a clean stop)."""
        self.process.terminate()
        try:
            return self.process.wait(15)
        finally:
            self._log.close()


class Workers:
    """New-protocol workers on an asyncio loop of their own (the bridge is another process)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="doc-workers", daemon=True)
        self.thread.start()
        self.workers: list[LiveNewWorker] = []

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def start(self, port: int, group: str, count: int) -> None:
        """``count`` more workers on the bridge at ``127.0.0.1:port``; returns once all joined."""

        async def start() -> None:
            for _ in range(count):
                name = f"doc-w{len(self.workers)}"
                worker = LiveNewWorker(
                    "127.0.0.1",
                    port,
                    group,
                    f"http://{name}:8083/",
                    lambda *a, **k: None,
                    heartbeat_interval_ms=500,
                    client_id=name,
                )
                worker.start()
                self.workers.append(worker)

        self._run(start())
        wait_until(
            lambda: all(w.member_epoch > 0 for w in self.workers), timeout=20, message="workers did not join"
        )

    def close(self) -> None:
        async def stop() -> None:
            for worker in self.workers:
                await worker.stop()

        try:
            self._run(stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)


@pytest.fixture
def workers() -> Iterator[Workers]:
    """New-protocol workers, stopped (left with epoch -1) at the end of the test."""
    w = Workers()
    try:
        yield w
    finally:
        w.close()
