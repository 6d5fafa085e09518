"""The config view from a watched JSON file (docs/serve.md, "The config view file").

Without an upstream cluster there is no Connect config topic to read, so an operator (or a deploy
tool) writes ``{"offset": N, "connectors": {"name": tasks}}`` to a file and the bridge follows it.
The file is edited while the bridge runs, so a half-written or broken file must never take the
bridge down or wipe the running view: the watcher logs the problem and keeps the last good view.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, ClassVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from connect_bridge.bridge.validation import format_validation_error
from connect_bridge.state.model import ConfigView, MemberMetadata
from connect_bridge.state.records import Record, RecordType

log = logging.getLogger(__name__)


def view_behind(records: list[Record], view_of: Callable[[str], ConfigView]) -> bool:
    """A member (re)joined with a config offset beyond its group's view: the config topic holds
    records the bridge has not read yet, and its members get CONFIG_MISMATCH until it has
    (``legacy_steps.encode_member_assignment``, ``ConnectGroup.assignment_header``), so read
    now rather than a poll interval later."""
    for record in records:
        value = record.value
        if (
            record.type is RecordType.MEMBER_METADATA
            and isinstance(value, MemberMetadata)
            and value.config_offset > view_of(record.group_id).offset
        ):
            return True
    return False


ConnectorName = Annotated[str, StringConstraints(min_length=1)]

RACY_WINDOW_NS = 2_000_000_000
"""A file modified this recently is re-read even when mtime and size look unchanged.

Some file systems keep mtime in whole seconds, so two same-size writes within one tick have the same
(mtime, size); re-reading (and hashing) a young file closes that gap, the way git's "racy" check does.
"""


class ConfigViewError(ValueError):
    """A config view file that cannot be used, as one line naming the file and the field."""


class _ConfigViewFile(BaseModel):
    # Strict ints: a JSON "4" or true for a task count is a tool bug worth reporting, not coercing.
    model_config = ConfigDict(extra="forbid", strict=True)

    offset: int = Field(ge=-1)
    connectors: dict[ConnectorName, Annotated[int, Field(ge=0)]]


def parse_config_view(data: bytes, source: str) -> ConfigView:
    """Decode and validate the file content; ``source`` names the file in errors."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigViewError(f"{source}: not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigViewError(
            f"{source}: invalid JSON: line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    try:
        parsed = _ConfigViewFile.model_validate(doc)
    except ValidationError as exc:
        raise ConfigViewError(format_validation_error(source, exc)) from None
    return ConfigView.of(parsed.offset, parsed.connectors)


def read_config_view(path: Path) -> ConfigView:
    """Read one config view file; raises ConfigViewError (also for an unreadable file)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigViewError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return parse_config_view(data, str(path))


ViewCallback = Callable[[ConfigView], Awaitable[None] | None]


class ViewDelivery:
    """What every config view source shares: the last good view, reporting a problem once and its
    end, delivering a view to the callback, and stopping.

    A source's ``poll`` never raises for a problem with what it reads (a broken file, an
    unreachable broker): it ``_report``s it and the running view stays, so a bad edit or a broker
    outage cannot wipe the connectors the coordinator assigns.
    """

    _logger: ClassVar[logging.Logger] = log

    def __init__(self, poll_interval_ms: int, unusable: str, recovered: str) -> None:
        """``unusable`` starts the warning about a problem, ``recovered`` is logged when it ends."""
        if poll_interval_ms <= 0:
            raise ValueError("poll_interval_ms must be positive")
        self.poll_interval_ms = poll_interval_ms
        self._unusable = unusable
        self._recovered = recovered
        self._problem: str | None = None
        self._view: ConfigView | None = None
        self._stopped = False
        self._wake: asyncio.Event | None = None

    @property
    def current(self) -> ConfigView | None:
        """The last view answered (None until the source has been read successfully once)."""
        return self._view

    def poll(self) -> ConfigView | None:
        raise NotImplementedError

    def _report(self, problem: str) -> None:
        # Once per distinct problem: a source left broken must not flood the log every poll.
        if problem != self._problem:
            kept = f"keeping the view at offset {self._view.offset}" if self._view else "no view yet"
            self._logger.warning("%s (%s): %s", self._unusable, kept, problem)
            self._problem = problem

    def _resolved(self) -> None:
        """The source is readable again after a reported problem."""
        if self._problem is not None:
            self._logger.info("%s", self._recovered)
            self._problem = None

    def _changed(self, view: ConfigView) -> ConfigView | None:
        """``view`` when it differs from the last one answered (and it becomes that), else None."""
        if view == self._view:
            return None
        self._view = view
        return view

    async def watch(self, callback: ViewCallback) -> None:
        """Call ``callback(view)`` with the source's view now (when valid) and after every change.

        Runs until ``stop()`` or cancellation. ``callback`` may be a plain or an async function; if it
        raises, the error is logged and the view still counts as delivered (so a failing callback is
        not retried, and not logged, every poll).
        """
        await self._poll_loop(callback)

    async def _poll_loop(self, callback: ViewCallback) -> None:
        """Poll (in a thread) every interval, deliver each new view, until ``stop()``."""
        self._stopped = False
        self._wake = asyncio.Event()
        try:
            while not self._stopped:
                view = await asyncio.to_thread(self.poll)
                if view is not None and not self._stopped:
                    await self._deliver(callback, view)
                try:
                    await asyncio.wait_for(self._wake.wait(), self.poll_interval_ms / 1000)
                except TimeoutError:
                    pass
                if not self._stopped:
                    self._wake.clear()  # woken by refresh(): one early poll
        finally:
            self._stopped = True
            self._wake = None

    async def _deliver(self, callback: ViewCallback, view: ConfigView) -> None:
        try:
            result = callback(view)
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("config view callback failed for offset %d", view.offset)

    def refresh(self) -> None:
        """Poll again now instead of at the end of the interval (call from the event loop's thread);
        a poll in progress is followed by another at once. Nothing when not watching."""
        if self._wake is not None:
            self._wake.set()

    def stop(self) -> None:
        """End ``watch`` promptly (call from the event loop's thread)."""
        self._stopped = True
        if self._wake is not None:
            self._wake.set()


class ConfigViewWatcher(ViewDelivery):
    """Polls a config view file and reports every new view.

    Polling (mtime + size, then a content hash) rather than inotify: it works the same on every OS
    and on network and container-mounted volumes, and a 1 s delay is nothing next to a rebalance.
    """

    def __init__(self, path: Path, poll_interval_ms: int = 1000) -> None:
        path = Path(path)
        super().__init__(
            poll_interval_ms, "config view file unusable", f"config view file {path} is valid again"
        )
        self.path = path
        self._signature: tuple[int, int] | None = None
        self._racy = False
        self._digest: bytes | None = None

    def poll(self) -> ConfigView | None:
        """Check the file once; the new view when it changed, else None. Never raises for file problems.

        Blocking (stat + a small read): ``watch`` runs it in a worker thread.
        """
        try:
            stat = os.stat(self.path)
        except OSError as exc:
            return self._unreadable(exc)
        signature = (stat.st_mtime_ns, stat.st_size)
        if signature == self._signature and not self._racy:
            return None
        self._signature = signature
        self._racy = time.time_ns() - stat.st_mtime_ns < RACY_WINDOW_NS
        try:
            data = self.path.read_bytes()
        except OSError as exc:
            return self._unreadable(exc)
        digest = hashlib.sha256(data).digest()
        if digest == self._digest:
            return None
        self._digest = digest
        try:
            view = parse_config_view(data, str(self.path))
        except ConfigViewError as exc:
            self._report(str(exc))
            return None
        self._resolved()
        return self._changed(view)  # None when reformatted only: nothing for the coordinator to do

    def _unreadable(self, exc: OSError) -> None:
        """Report the file unreadable and forget its signature and digest: once it is back it is
        read and checked again even if unchanged, which ends the reported problem."""
        self._report(f"{self.path}: cannot read: {exc.strerror or exc}")
        self._signature = self._digest = None
