"""Throughput of the Connect embedded-protocol codec against a hand-written ``struct`` baseline.

Why a baseline in the same run: absolute ops/s depend on the machine; the ratio to the smallest
reasonable pure-Python implementation of the same layout says whether the ``construct`` design costs
too much. One operation = decode + encode of the payload. The last output line is one JSON object.

Run: ``python benchmarks/codecs.py [--seconds S]``.
"""

from __future__ import annotations

import argparse
import json
import struct
import time
from collections.abc import Callable

from connect_bridge.codecs.connect_protocol import (
    Assignment,
    ConnectorGroup,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

CONNECTORS = 50
TASKS = 20
VERSION = 1


def sample_assignment() -> Assignment:
    """50 connector groups, each ``-1`` then tasks 0..19 (the size of a busy worker's allocation)."""
    groups = tuple(ConnectorGroup(f"connector-{i:03d}", (-1, *range(TASKS))) for i in range(CONNECTORS))
    return Assignment(
        0, "connect-1-5b2e6c1a-0c3d-4f1e-9a1b-2f7c8d9e0a1b", "http://worker-1:8083/", 1234, groups, (), 0
    )


# --- baseline: the same v1 layout with nothing but the struct module (no tolerance, no checks) ---

_H, _I, _Q = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")


def _b_read_str(buf: bytes, pos: int) -> tuple[str, int]:
    (n,) = _H.unpack_from(buf, pos)
    return buf[pos + 2 : pos + 2 + n].decode(), pos + 2 + n


def _b_read_groups(buf: bytes, pos: int) -> tuple[list[tuple[str, tuple[int, ...]]] | None, int]:
    (count,) = _I.unpack_from(buf, pos)
    pos += 4
    if count < 0:
        return None, pos
    groups = []
    for _ in range(count):
        name, pos = _b_read_str(buf, pos)
        (n,) = _I.unpack_from(buf, pos)
        groups.append((name, struct.unpack_from(f">{n}i", buf, pos + 4)))
        pos += 4 + 4 * n
    return groups, pos


def baseline_decode_assignment(buf: bytes, pos: int = 0) -> tuple:
    (version,) = _H.unpack_from(buf, pos)
    (error,) = _H.unpack_from(buf, pos + 2)
    leader, pos = _b_read_str(buf, pos + 4)
    url, pos = _b_read_str(buf, pos)
    (offset,) = _Q.unpack_from(buf, pos)
    assigned, pos = _b_read_groups(buf, pos + 8)
    revoked, pos = _b_read_groups(buf, pos)
    (delay,) = _I.unpack_from(buf, pos)
    return version, error, leader, url, offset, assigned, revoked, delay


def baseline_decode_subscription(buf: bytes) -> tuple:
    (version,) = _H.unpack_from(buf, 0)
    url, pos = _b_read_str(buf, 2)
    (offset,) = _Q.unpack_from(buf, pos)
    (size,) = _I.unpack_from(buf, pos + 8)
    allocation = None if size < 0 else baseline_decode_assignment(buf[pos + 12 : pos + 12 + size])
    return version, url, offset, allocation


def _b_str(value: str) -> bytes:
    raw = value.encode()
    return _H.pack(len(raw)) + raw


def _b_groups(groups: list[tuple[str, tuple[int, ...]]] | None) -> bytes:
    if groups is None:
        return _I.pack(-1)
    parts = [_I.pack(len(groups))]
    for name, tasks in groups:
        parts.append(_b_str(name))
        parts.append(struct.pack(f">{len(tasks) + 1}i", len(tasks), *tasks))
    return b"".join(parts)


def baseline_encode_assignment(value: tuple) -> bytes:
    version, error, leader, url, offset, assigned, revoked, delay = value
    return b"".join(
        (
            _H.pack(version),
            _H.pack(error),
            _b_str(leader),
            _b_str(url),
            _Q.pack(offset),
            _b_groups(assigned),
            _b_groups(revoked),
            _I.pack(delay),
        )
    )


def baseline_encode_subscription(value: tuple) -> bytes:
    version, url, offset, allocation = value
    inner = _I.pack(-1) if allocation is None else _I.pack(0)
    if allocation is not None:
        body = baseline_encode_assignment(allocation)
        inner = _I.pack(len(body)) + body
    return _H.pack(version) + _b_str(url) + _Q.pack(offset) + inner


# --- measurement ---


def _batch_size(op: Callable[[], object], target: float) -> int:
    """How many calls of ``op`` take about ``target`` seconds."""
    batch = 1
    while True:
        start = time.perf_counter()
        for _ in range(batch):
            op()
        elapsed = time.perf_counter() - start
        if elapsed > 0.01:
            return max(1, int(batch * target / elapsed))
        batch *= 2


def _best_per_call(op: Callable[[], object], batch: int) -> float:
    start = time.perf_counter()
    for _ in range(batch):
        op()
    return (time.perf_counter() - start) / batch


def compare(
    ours: Callable[[], object], baseline: Callable[[], object], seconds: float
) -> tuple[float, float]:
    """ops/s of both, measured in alternating short batches (best of each).

    Interleaving matters on a shared machine: load and clock changes then hit both sides alike, so the
    ratio stays meaningful even when the absolute figures move.
    """
    rounds = 20
    target = seconds / (2 * rounds)
    sizes = (_batch_size(ours, target), _batch_size(baseline, target))
    best = [float("inf"), float("inf")]
    for _ in range(rounds):
        for side, op in enumerate((ours, baseline)):
            best[side] = min(best[side], _best_per_call(op, sizes[side]))
    return 1.0 / best[0], 1.0 / best[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="time budget per case")
    args = parser.parse_args()

    asg = sample_assignment()
    sub = Subscription("http://worker-4:8083/", 1234, asg)
    asg_bytes = encode_assignment(asg, VERSION)
    sub_bytes = encode_subscription(sub, VERSION)
    # The baseline must agree with the codec on the bytes, or the comparison means nothing.
    assert baseline_encode_assignment(baseline_decode_assignment(asg_bytes)) == asg_bytes
    assert baseline_encode_subscription(baseline_decode_subscription(sub_bytes)) == sub_bytes
    assert encode_subscription(decode_subscription(sub_bytes), VERSION) == sub_bytes

    cases = {
        "subscription": (
            lambda: encode_subscription(
                decode_subscription(sub_bytes, remember=False), VERSION, remember=False
            ),
            lambda: baseline_encode_subscription(baseline_decode_subscription(sub_bytes)),
            len(sub_bytes),
        ),
        "assignment": (
            lambda: encode_assignment(decode_assignment(asg_bytes, remember=False), VERSION, remember=False),
            lambda: baseline_encode_assignment(baseline_decode_assignment(asg_bytes)),
            len(asg_bytes),
        ),
    }
    result: dict[str, object] = {"connectors": CONNECTORS, "tasks_per_connector": TASKS, "version": VERSION}
    ratios = []
    for name, (ours, baseline, size) in cases.items():
        ours_ops, base_ops = compare(ours, baseline, args.seconds)
        ratio = ours_ops / base_ops
        ratios.append(ratio)
        print(
            f"{name:12s} ({size} bytes): construct {ours_ops:10.0f} ops/s   struct baseline "
            f"{base_ops:10.0f} ops/s   ratio {ratio:.2f}"
        )
        result[f"{name}_ops"] = round(ours_ops, 1)
        result[f"{name}_baseline_ops"] = round(base_ops, 1)
        result[f"{name}_ratio"] = round(ratio, 3)
    result["ratio"] = round(min(ratios), 3)
    print(f"ratio (worst case) = {result['ratio']:.2f}  [one op = decode + encode]")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
