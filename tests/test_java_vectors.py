"""The golden vectors are what their source of truth says today (``tests/golden_files.py``).

- The Connect embedded-protocol vectors (``tests/data/connect-embedded-protocol.json``), which the
  quick tests read without Java, are rebuilt from Apache Kafka 4.3.1's Connect runtime on every run
  (a jvm test): every roundtrip vector's bytes are what Kafka writes and reads back, every decoded
  form what Kafka's readers return.
- The Java add-on's vectors are what the Python codec encodes (``tests/gen_java_vectors.py``).
"""

from __future__ import annotations

import json

import pytest

import connect_vectors
import gen_java_vectors as gen


@pytest.fixture(scope="module")
def kafka_connect_vectors() -> str:
    """The Connect vectors file as Kafka's classes give it now (one JVM run; marked jvm)."""
    return connect_vectors.build_vectors()


def test_connect_vectors_are_what_kafka_writes_and_reads(kafka_connect_vectors: str) -> None:
    checked_in = connect_vectors.VECTORS_PATH.read_text(encoding="utf-8")
    if kafka_connect_vectors != checked_in:
        ours = {v["id"]: v for v in json.loads(checked_in)}
        kafkas = {v["id"]: v for v in json.loads(kafka_connect_vectors)}
        differ = sorted(i for i in ours.keys() | kafkas.keys() if ours.get(i) != kafkas.get(i))
        pytest.fail(
            f"{connect_vectors.GOLDEN.stale_message()}; Kafka differs on {', '.join(differ) or 'the layout'}",
            pytrace=False,
        )


def test_connect_vectors_cover_every_kind_and_version() -> None:
    roundtrip = {(v["kind"], v["version"]) for v in connect_vectors.load_vectors() if v["roundtrip"]}
    assert roundtrip == {(kind, version) for kind in ("subscription", "assignment") for version in (0, 1, 2)}


def test_addon_vectors_file_is_current() -> None:
    assert gen.GOLDEN.stale_message() is None


def test_addon_vectors_cover_every_connect_group_api_both_ways() -> None:
    vectors = json.loads(gen.build_vectors())
    assert {(v["api_key"], v["request"]) for v in vectors} == {
        (key, request) for key in (1000, 1001, 1002, 1003) for request in (True, False)
    }
