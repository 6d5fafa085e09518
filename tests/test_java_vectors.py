"""The Java add-on's golden vectors are what the Python codec encodes today (tests/gen_java_vectors.py)."""

from __future__ import annotations

import json

import gen_java_vectors as gen


def test_vectors_file_is_current() -> None:
    assert gen.VECTORS_PATH.read_text(encoding="utf-8") == gen.build_vectors(), (
        "run: python tests/gen_java_vectors.py"
    )


def test_vectors_cover_every_connect_group_api_both_ways() -> None:
    vectors = json.loads(gen.build_vectors())
    assert {(v["api_key"], v["request"]) for v in vectors} == {
        (key, request) for key in (1000, 1001, 1002, 1003) for request in (True, False)
    }
