"""Golden vectors of the Connect embedded protocol, as Apache Kafka's own Connect runtime writes them.

``tests/data/connect-embedded-protocol.json`` is a JSON array, one vector per line: the bytes a
Connect worker puts in a JoinGroup's protocol metadata (``kind: subscription``, the worker's URL,
config offset and, from v1, its current assignment as "allocation") and a leader in a SyncGroup's
member assignment (``kind: assignment``). The quick tests (``tests/test_connect_protocol.py``,
``tests/test_cli_codec.py``) read it without Java; ``tests/test_java_vectors.py`` (a jvm test)
rebuilds it here from Kafka 4.3.1's classes on every run and fails when one byte differs.

What each vector holds. Written by hand (the test cases): ``id``, ``kind``, ``version`` (the int16
at the start of ``hex``: 0 eager, 1 compatible, 2 sessioned; 3 and -1 only on special vectors),
``input`` (the logical message: a subscription is ``url``, ``config_offset`` and, from v1,
``allocation``, an assignment object or null; an assignment is ``error``, ``leader``,
``leader_url``, ``config_offset``, ``assignment`` and, from v1, ``revoked`` and ``delay``; the
work lists are groups ``{"connector", "tasks"}`` in wire order, task -1 being the connector
itself, null meaning a null array), ``roundtrip``, and on special vectors ``note``
(``null-array``, ``forward-compat``, ``missing-optional-fields``, ``invalid``), ``mutation`` (how
the bytes differ from a clean encoding: ``header_version``, ``allocation_header_version``,
``trailing_hex`` with ``where``, ``truncated_after``, ``truncated_inside`` with
``bytes_removed``), ``comment``, and the ``hex`` of every non-roundtrip vector (bytes Kafka's
writer never produces).

What Java says (rebuilt by :func:`build_vectors`):

- ``hex`` of a roundtrip vector: what Kafka's writer for ``version`` writes for ``input``
  (``ConnectProtocol`` for v0, ``IncrementalCooperativeConnectProtocol`` for v1/v2); writing the
  decoded object again must give the same bytes.
- ``decoded``: what the reader the runtime uses (the incremental one, for every version) returns,
  as ``{version, error, leader, leader_url, config_offset, connectors, tasks, revoked_connectors,
  revoked_tasks, delay}`` for an assignment (``tasks`` as ``{connector, task}``; null arrays and
  missing fields read as empty or 0) and ``{version, url, config_offset, allocation}`` for a
  subscription (allocation null for v0, for null bytes and for absent bytes, where Kafka's
  reader returns its empty, leaderless assignment); absent when the reader fails.
- ``decode_ok`` and ``decode_error`` (special vectors): whether that reader accepted the bytes, and
  its exception.
- ``eager_reader_result``: what the v0-only reader (``ConnectProtocol``) makes of the same bytes.
- ``java_reencode_hex`` (null-array vectors): Kafka's writer on the decoded object (it never writes
  a null array, so a count of -1 comes back as 0).
- ``clean_hex``: Kafka's writer on ``input`` at the version ``clean_hex`` starts with, before the
  mutation.

Java writes a connector group for every connector whose instance it assigns, in its own set order,
and the task-only groups after them; the ``input`` lists are in that wire order, so an encoder that
follows ``input`` reproduces ``hex``.

``python tests/golden_files.py`` rewrites the file after a change to the cases. Java 17+ (a JDK:
the source launcher compiles the oracle in memory) and the Kafka jars (``tests/kafka_jars.py``)
are needed. Standard library only.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from golden_files import GoldenFile
from kafka_jars import java_binary, kafka_classpath

TESTS = Path(__file__).resolve().parent
VECTORS_PATH = TESTS / "data" / "connect-embedded-protocol.json"
ORACLE = TESTS / "java" / "ConnectEmbeddedProtocolOracle.java"
ORACLE_TIMEOUT_S = 300.0


def load_vectors() -> list[dict[str, Any]]:
    """The checked-in vectors."""
    return json.loads(VECTORS_PATH.read_text(encoding="utf-8"))


def format_vectors(vectors: list[dict[str, Any]]) -> str:
    """One vector per line, so a diff names the vectors that changed."""
    lines = ",\n".join("  " + json.dumps(vector, ensure_ascii=False) for vector in vectors)
    return f"[\n{lines}\n]\n"


def ask_java(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Kafka's answers to ``requests`` (see ``tests/java/ConnectEmbeddedProtocolOracle.java``), one
    JVM for the whole list."""
    done = subprocess.run(
        [java_binary(), "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-cp", kafka_classpath(), str(ORACLE)],
        input=json.dumps(requests),
        capture_output=True,
        text=True,
        timeout=ORACLE_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{ORACLE.name} exited {done.returncode}:\n{done.stderr[-4000:]}")
    answers = json.loads(done.stdout)
    if len(answers) != len(requests):
        raise RuntimeError(f"{ORACLE.name} answered {len(answers)} of {len(requests)} requests")
    return answers


def _encode(vector: dict[str, Any], version: int) -> dict[str, Any]:
    return {"op": "encode", "kind": vector["kind"], "version": version, "input": vector["input"]}


def _clean_version(vector: dict[str, Any]) -> int:
    return int.from_bytes(bytes.fromhex(vector["clean_hex"][:4]), "big", signed=True)


def _set(vector: dict[str, Any], key: str, value: Any, *, after: str) -> None:
    """Set ``key``; a key the vector did not have goes right after ``after``, so the line keeps the
    order of its fields."""
    if key in vector:
        vector[key] = value
        return
    items = list(vector.items())
    at = [k for k, _ in items].index(after) + 1
    vector.clear()
    vector.update([*items[:at], (key, value), *items[at:]])


def rebuild(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The vectors with every field Java decides asked of Java again (two JVM rounds: the writer for
    the roundtrip vectors' bytes, then the readers on the final bytes)."""
    vectors = [dict(case) for case in cases]
    encodes = [(v, "hex", _encode(v, v["version"])) for v in vectors if v["roundtrip"]]
    encodes += [(v, "clean_hex", _encode(v, _clean_version(v))) for v in vectors if "clean_hex" in v]
    for (vector, key, _), answer in zip(encodes, ask_java([r for _, _, r in encodes]), strict=True):
        if "error" in answer:
            raise AssertionError(f"{vector['id']}: Kafka's writer failed: {answer['error']}")
        vector[key] = answer["hex"]
    decodes = [{"op": "decode", "kind": v["kind"], "hex": v["hex"]} for v in vectors]
    for vector, answer in zip(vectors, ask_java(decodes), strict=True):
        failed = "error" in answer
        if failed:
            vector.pop("decoded", None)
        else:
            _set(vector, "decoded", answer["decoded"], after="hex")
        if vector["roundtrip"] and (failed or answer.get("reencoded_hex") != vector["hex"]):
            raise AssertionError(f"{vector['id']}: Kafka does not read back what it wrote: {answer}")
        if "decode_ok" in vector:
            vector["decode_ok"] = not failed
            if failed:
                _set(vector, "decode_error", answer["error"], after="decode_ok")
            else:
                vector.pop("decode_error", None)
        if "eager_reader_result" in vector:
            vector["eager_reader_result"] = answer["eager"]
        if "java_reencode_hex" in vector:
            vector["java_reencode_hex"] = answer["reencoded_hex"]
    return vectors


def build_vectors() -> str:
    """The vectors file's text as Kafka's classes give it now."""
    return format_vectors(rebuild(load_vectors()))


GOLDEN = GoldenFile(VECTORS_PATH, build_vectors, "python tests/golden_files.py")


if __name__ == "__main__":
    print(build_vectors(), end="")
    sys.exit(0)
