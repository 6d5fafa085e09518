"""The watched config view file: parsing with clear errors, change detection, surviving bad edits."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path

import pytest

from connect_bridge.bridge.stores.config_source import ConfigViewError, ConfigViewWatcher, read_config_view
from connect_bridge.state.model import ConfigView
from polling import eventually


def write_view(path: Path, doc: object) -> None:
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc), encoding="utf-8")


def test_read_config_view(tmp_path: Path) -> None:
    path = tmp_path / "view.json"
    write_view(path, {"offset": 7, "connectors": {"b": 2, "a": 0}})
    assert read_config_view(path) == ConfigView.of(7, {"a": 0, "b": 2})
    write_view(path, {"offset": -1, "connectors": {}})
    assert read_config_view(path) == ConfigView()


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ({"offset": -2, "connectors": {}}, "offset: Input should be greater than or equal to -1"),
        ({"offset": 1, "connectors": {"a": -1}}, "connectors.a: Input should be greater than or equal to 0"),
        ({"offset": 1, "connectors": {"my.sink": -1}}, 'connectors["my.sink"]: Input should be greater'),
        ({"offset": 1, "connectors": {"a": "3"}}, "connectors.a: Input should be a valid integer"),
        ({"offset": True, "connectors": {}}, "offset: Input should be a valid integer"),
        ({"connectors": {}}, "offset: Field required"),
        ({"offset": 1, "connectors": {}, "x": 1}, "x: Extra inputs are not permitted"),
        ({"offset": 1, "connectors": {"": 1}}, 'connectors[""]: String should have at least 1 character'),
        ([1], "(top level): Input should be a valid dictionary"),
        ('{"offset": 1,', "invalid JSON: line 1, column 14: Expecting property name"),
    ],
)
def test_errors_name_file_and_field(tmp_path: Path, doc: object, expected: str) -> None:
    path = tmp_path / "view.json"
    write_view(path, doc)
    with pytest.raises(ConfigViewError) as info:
        read_config_view(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: "), message
    assert expected in message, message


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigViewError, match="cannot read: No such file"):
        read_config_view(tmp_path / "missing.json")


def test_poll_ignores_touch_and_reformatting(tmp_path: Path) -> None:
    path = tmp_path / "view.json"
    write_view(path, {"offset": 1, "connectors": {"a": 1}})
    watcher = ConfigViewWatcher(path, poll_interval_ms=10)
    assert watcher.poll() == ConfigView.of(1, {"a": 1})
    assert watcher.poll() is None
    os.utime(path)
    assert watcher.poll() is None
    write_view(path, '{ "connectors": {"a": 1}, "offset": 1 }')
    assert watcher.poll() is None
    # Same size, same mtime: caught by the racy-window re-read and the content hash.
    stat = path.stat()
    write_view(path, {"offset": 1, "connectors": {"b": 1}})
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert watcher.poll() == ConfigView.of(1, {"b": 1})


def test_watcher_reports_changes_and_survives_bad_files(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "view.json"
    write_view(path, {"offset": 1, "connectors": {"a": 1}})
    seen: list[ConfigView] = []

    async def wait_for(count: int) -> None:
        message = lambda: f"expected {count} views, got {seen}"  # noqa: E731
        await eventually(lambda: len(seen) >= count, 5.0, 0.005, message)

    async def warned(fragment: str) -> None:
        """Until the watcher warned about ``fragment``; then a few more polls of the same problem,
        which must not warn again."""
        await eventually(lambda: any(fragment in r.getMessage() for r in caplog.records), 5.0, 0.005)
        await asyncio.sleep(0.1)

    async def scenario() -> None:
        watcher = ConfigViewWatcher(path, poll_interval_ms=10)

        async def on_view(view: ConfigView) -> None:
            seen.append(view)

        task = asyncio.create_task(watcher.watch(on_view))
        await wait_for(1)  # delivered once at start
        write_view(path, {"offset": 2, "connectors": {"a": 3}})
        await wait_for(2)
        write_view(path, '{"offset": 3, "connectors": {"a": -5}}')  # bad: kept out
        await warned("keeping the view at offset 2")
        path.unlink()  # gone: still no crash
        await warned("No such file")
        assert watcher.current == ConfigView.of(2, {"a": 3})
        write_view(path, {"offset": 4, "connectors": {"a": 3, "b": 1}})
        await wait_for(3)
        watcher.stop()
        await asyncio.wait_for(task, 1)

    with caplog.at_level(logging.WARNING, logger="connect_bridge.bridge.stores.config_source"):
        asyncio.run(scenario())
    assert seen == [
        ConfigView.of(1, {"a": 1}),
        ConfigView.of(2, {"a": 3}),
        ConfigView.of(4, {"a": 3, "b": 1}),
    ]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings  # once per distinct problem, not once per poll
    assert "keeping the view at offset 2" in warnings[0] and "connectors.a" in warnings[0]
    assert "No such file" in warnings[1]


def test_watcher_starts_without_a_valid_file_and_tolerates_callback_errors(tmp_path: Path) -> None:
    path = tmp_path / "view.json"
    write_view(path, "not json")
    seen: list[ConfigView] = []

    def on_view(view: ConfigView) -> None:  # a plain function works too
        seen.append(view)
        raise RuntimeError("coordinator refused")

    async def scenario() -> None:
        watcher = ConfigViewWatcher(path, poll_interval_ms=10)
        task = asyncio.create_task(watcher.watch(on_view))
        await asyncio.sleep(0.05)  # a few polls of the invalid file: none may deliver a view
        assert seen == [] and watcher.current is None
        write_view(path, {"offset": 0, "connectors": {"x": 2}})
        await eventually(lambda: seen, 5.0, 0.005)
        await asyncio.sleep(0.05)  # a few polls after the callback raised: the watcher goes on
        assert not task.done()
        watcher.stop()
        await asyncio.wait_for(task, 1)

    asyncio.run(scenario())
    assert seen == [ConfigView.of(0, {"x": 2})]


def test_refresh_polls_at_once_and_only_once(tmp_path: Path) -> None:
    """``refresh()`` (the server's "a member is ahead of the view") polls now rather than at the end
    of the interval, then the watcher waits for its interval again."""
    path = tmp_path / "view.json"
    write_view(path, {"offset": 1, "connectors": {"a": 1}})
    seen: list[ConfigView] = []
    polls: list[float] = []

    class Counting(ConfigViewWatcher):
        def poll(self) -> ConfigView | None:
            polls.append(1)
            return super().poll()

    async def scenario() -> None:
        watcher = Counting(path, poll_interval_ms=60_000)
        task = asyncio.create_task(watcher.watch(seen.append))
        await eventually(lambda: seen, 5.0, 0.005)
        write_view(path, {"offset": 2, "connectors": {"a": 2}})
        watcher.refresh()
        await eventually(lambda: len(seen) == 2, 5.0, 0.005)
        await asyncio.sleep(0.1)  # time to spin, were the refresh event left set
        assert len(polls) == 2  # one at start, one refresh: no spinning on a set event
        watcher.stop()
        await asyncio.wait_for(task, 1)

    asyncio.run(scenario())
    assert seen == [ConfigView.of(1, {"a": 1}), ConfigView.of(2, {"a": 2})]
