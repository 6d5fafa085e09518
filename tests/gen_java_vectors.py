"""Golden vectors for the Java add-on's Connect group codec (jvm/connect-bridge-worker).

The Python codec (``connect_bridge.codecs.messages``, from the JSON specs) encodes a set of messages of
the APIs 1000-1003, version 0, into ``VECTORS_PATH``: for each, the API key, whether it is a request,
its fields (as ``to_dict`` names them, bytes as hex) and the encoded body as hex. The add-on's JUnit
test decodes every body, compares the fields and encodes it back byte for byte, so the two codecs
cannot drift apart; ``tests/test_java_vectors.py`` fails when this file is not current.

Run ``python tests/golden_files.py`` (or this file) after changing a spec or the vectors.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from connect_bridge.codecs import messages as m
from connect_bridge.codecs.ids import ConnectorTaskId
from golden_files import GoldenFile

VECTORS_PATH = (
    Path(__file__).resolve().parents[1]
    / "jvm/connect-bridge-worker/src/test/resources/connect-group-vectors.json"
)

_ITEMS = frozenset(
    {
        ConnectorTaskId("src", -1),
        ConnectorTaskId("src", 0),
        ConnectorTaskId("src", 2),
        ConnectorTaskId("sink-ü", 1),
    }
)


def _messages() -> list[tuple[str, Any]]:
    hb, hbr = m.ConnectGroupHeartbeatRequest, m.ConnectGroupHeartbeatResponse
    prep, prepr = m.ConnectGroupPrepareAssignmentRequest, m.ConnectGroupPrepareAssignmentResponse
    inst, instr = m.ConnectGroupInstallAssignmentRequest, m.ConnectGroupInstallAssignmentResponse
    desc, descr = m.ConnectGroupDescribeRequest, m.ConnectGroupDescribeResponse
    items = m.connectors_and_tasks(_ITEMS)
    empty = m.connectors_and_tasks(())
    return [
        (
            "heartbeat join, client assignors, owned work",
            hb(
                group_id="connect-cluster",
                member_id="connect-1-4f1c",
                member_epoch=0,
                instance_id="worker-1",
                rack_id=None,
                rebalance_timeout_ms=60000,
                worker_url="http://w1:8083/",
                config_offset=12,
                server_assignor=None,
                client_assignors=[
                    hb.Assignor(
                        name="connect-incremental",
                        minimum_version=1,
                        maximum_version=2,
                        reason=0,
                        metadata_version=2,
                        metadata=b"\x00\x01\xff",
                    )
                ],
                connectors_and_tasks=items,
            ),
        ),
        ("heartbeat, nothing changed", hb(group_id="connect-cluster", member_id="m1", member_epoch=4)),
        (
            "heartbeat, owned work now empty, server assignor",
            hb(
                group_id="g",
                member_id="m1",
                member_epoch=7,
                server_assignor="connect-cooperative",
                connectors_and_tasks=empty,
            ),
        ),
        ("leave", hb(group_id="g", member_id="m1", member_epoch=-1)),
        (
            "heartbeat response with an assignment",
            hbr(
                throttle_time_ms=0,
                error_code=0,
                error_message=None,
                member_id="m1",
                member_epoch=5,
                heartbeat_interval_ms=3000,
                assignment=hbr.Assignment(
                    error=0,
                    connectors_and_tasks=items,
                    leader_id="m1",
                    leader_url="http://w1:8083/",
                    config_offset=12,
                    metadata_version=0,
                    metadata=b"",
                ),
            ),
        ),
        (
            "heartbeat response without an assignment, COMPUTE_ASSIGNMENT",
            hbr(
                throttle_time_ms=5,
                error_code=1000,
                error_message="compute",
                member_id=None,
                member_epoch=9,
                heartbeat_interval_ms=2500,
                assignment=None,
            ),
        ),
        (
            "heartbeat response, fenced",
            hbr(
                throttle_time_ms=0,
                error_code=110,
                error_message="The member epoch is fenced.",
                member_id=None,
                member_epoch=0,
                heartbeat_interval_ms=0,
                assignment=None,
            ),
        ),
        (
            "heartbeat response, config mismatch, no leader",
            hbr(
                throttle_time_ms=0,
                error_code=0,
                member_id=None,
                member_epoch=3,
                heartbeat_interval_ms=3000,
                assignment=hbr.Assignment(
                    error=1,
                    connectors_and_tasks=empty,
                    leader_id=None,
                    leader_url=None,
                    config_offset=-1,
                    metadata_version=2,
                    metadata=b"\x07",
                ),
            ),
        ),
        ("prepare assignment", prep(group_id="g", member_id="m1", member_epoch=5)),
        (
            "prepare assignment response",
            prepr(
                throttle_time_ms=0,
                error_code=0,
                error_message=None,
                group_epoch=8,
                assignment_epoch=7,
                assignor_name="connect-incremental",
                config_offset=40,
                connectors=[prepr.ConfiguredConnector(name="src", task_count=3)],
                members=[
                    prepr.Member(
                        member_id="m1",
                        member_epoch=7,
                        instance_id=None,
                        worker_url="http://w1:8083/",
                        config_offset=40,
                        assignor=prepr.Member.Assignor(metadata_version=2, reason=0, metadata=b""),
                        connectors_and_tasks=items,
                    ),
                    prepr.Member(
                        member_id="m2",
                        member_epoch=8,
                        instance_id="w2",
                        worker_url="http://w2:8083/",
                        config_offset=39,
                        assignor=prepr.Member.Assignor(metadata_version=1, reason=2, metadata=b"\x01"),
                        connectors_and_tasks=empty,
                    ),
                ],
            ),
        ),
        (
            "install assignment",
            inst(
                group_id="g",
                member_id="m1",
                member_epoch=7,
                group_epoch=8,
                error=0,
                members=[
                    inst.Member(member_id="m1", connectors_and_tasks=items, metadata_version=2, metadata=b""),
                    inst.Member(
                        member_id="m2", connectors_and_tasks=empty, metadata_version=2, metadata=b"\x02"
                    ),
                ],
            ),
        ),
        ("install assignment response", instr(throttle_time_ms=0, error_code=1001, error_message="invalid")),
        ("describe", desc(group_ids=["connect-cluster"])),
        (
            "describe response",
            descr(
                throttle_time_ms=0,
                groups=[
                    descr.DescribedGroup(
                        error_code=0,
                        error_message=None,
                        group_id="connect-cluster",
                        group_type="connect",
                        group_state="Stable",
                        group_epoch=8,
                        assignment_epoch=8,
                        assignor_name="connect-cooperative",
                        leader_id="m1",
                        leader_url="http://w1:8083/",
                        config_offset=40,
                        connectors=[descr.DescribedGroup.ConfiguredConnector(name="src", task_count=3)],
                        members=[
                            descr.DescribedGroup.Member(
                                member_id="m1",
                                instance_id=None,
                                rack_id=None,
                                client_id="connect-1",
                                client_host="/127.0.0.1",
                                worker_url="http://w1:8083/",
                                protocol="new",
                                member_epoch=8,
                                member_state="stable",
                                config_offset=40,
                                assignment=items,
                                target_assignment=None,
                            ),
                            descr.DescribedGroup.Member(
                                member_id="m2",
                                instance_id="w2",
                                rack_id="r1",
                                client_id="connect-2",
                                client_host="/127.0.0.2",
                                worker_url="http://w2:8083/",
                                protocol="sessioned",
                                member_epoch=8,
                                member_state="stable",
                                config_offset=40,
                                assignment=empty,
                                target_assignment=items,
                            ),
                        ],
                    )
                ],
            ),
        ),
    ]


_VERSION = 0
"""The add-on speaks version 0 of every Connect group API."""


def _plain(value: Any) -> Any:
    """JSON-friendly, fields in wire order: messages and structs as objects (by their ``fields``
    table), bytes as ``{"hex": ...}``, arrays as lists."""
    if isinstance(value, bytes | bytearray):
        return {"hex": bytes(value).hex()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    fields = getattr(value, "fields", None)
    if isinstance(fields, dict):
        return {
            name: _plain(getattr(value, name))
            for name, field in fields.items()
            if field.for_version_q(_VERSION)
        }
    return value


def build_vectors() -> str:
    """The vectors file's text."""
    out = []
    for name, msg in _messages():
        body = msg.encode(version=_VERSION)
        decoded = type(msg).decode(body, version=_VERSION)  # DataContainers all the way down, for to_dict
        out.append(
            {
                "name": name,
                "api_key": msg.API_KEY,
                "request": msg.is_request(),
                "fields": _plain(decoded),
                "hex": body.hex(),
            }
        )
    return json.dumps(out, indent=1, ensure_ascii=False, sort_keys=False) + "\n"


GOLDEN = GoldenFile(VECTORS_PATH, build_vectors, "python tests/golden_files.py")


def main() -> int:
    GOLDEN.write()
    print(f"wrote {VECTORS_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
