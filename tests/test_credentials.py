"""The credentials file of terminated SASL (``bridge/security/credentials.py``): written, read back,
used, refused."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import yaml
from kafka.net.sasl.scram import ScramClient

from connect_bridge.bridge.security.credentials import CredentialsError, add_user, load_credentials
from connect_bridge.bridge.security.scram import PlainServer, ScramServer, verify_password

PASSWORD = "correct horse battery staple"


def test_add_user_writes_kafkas_four_values_and_no_password(tmp_path: Path) -> None:
    path = tmp_path / "credentials.yaml"
    add_user(path, "alice", PASSWORD)
    add_user(path, "bob", "bob-pw", mechanisms=["SCRAM-SHA-512"], iterations=8192)
    text = path.read_text(encoding="utf-8")
    assert PASSWORD not in text and "bob-pw" not in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    users = yaml.safe_load(text)["users"]
    assert set(users["alice"]) == {"SCRAM-SHA-256", "SCRAM-SHA-512"} and set(users["bob"]) == {
        "SCRAM-SHA-512"
    }
    assert set(users["alice"]["SCRAM-SHA-256"]) == {"salt", "iterations", "stored_key", "server_key"}
    assert (
        users["alice"]["SCRAM-SHA-256"]["iterations"] == 4096
        and users["bob"]["SCRAM-SHA-512"]["iterations"] == 8192
    )
    assert users["alice"]["SCRAM-SHA-256"]["salt"] != users["alice"]["SCRAM-SHA-512"]["salt"]  # a salt each

    store = load_credentials(path)
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        credential = store.lookup(mechanism, "alice")
        assert credential is not None and verify_password(mechanism, credential, PASSWORD)
    assert store.lookup("SCRAM-SHA-256", "bob") is None

    # What was read back authenticates a real client, and PLAIN too.
    server = ScramServer("SCRAM-SHA-512", store.lookup)
    client = ScramClient("bob", "bob-pw", "SCRAM-SHA-512")
    client.process_server_first_message(server.evaluate(client.first_message()))
    client.process_server_final_message(server.evaluate(client.final_message()))
    assert server.principal == "User:bob"
    assert PlainServer(store.lookup).evaluate(b"\x00alice\x00" + PASSWORD.encode()) == b""


def test_add_user_replaces_the_password_and_keeps_the_others(tmp_path: Path) -> None:
    path = tmp_path / "credentials.yaml"
    add_user(path, "alice", PASSWORD)
    add_user(path, "carol", "carol-pw")
    store = add_user(path, "alice", "new-pw")
    alice = load_credentials(path).lookup("SCRAM-SHA-256", "alice")
    assert alice is not None and verify_password("SCRAM-SHA-256", alice, "new-pw")
    assert not verify_password("SCRAM-SHA-256", alice, PASSWORD)
    assert set(store.users) == {"alice", "carol"}
    assert set(store.without_user("carol").users) == {"alice"}


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"iterations": 1000}, r"iterations must be in 4096\.\.16384"),
        ({"mechanisms": ["SCRAM-SHA-1"]}, "unknown mechanism SCRAM-SHA-1"),
        ({"mechanisms": []}, "at least one mechanism"),
        ({"password": ""}, "password must not be empty"),
        ({"user": ""}, "user name must not be empty"),
    ],
)
def test_add_user_refuses(tmp_path: Path, kwargs: dict[str, object], error: str) -> None:
    path = tmp_path / "credentials.yaml"
    arguments: dict[str, object] = {"user": "alice", "password": PASSWORD} | kwargs
    with pytest.raises(ValueError, match=error):
        add_user(path, **arguments)  # type: ignore[arg-type]
    assert not path.exists()


GOOD = {
    "salt": "c2FsdHNhbHQ=",
    "iterations": 4096,
    "stored_key": "A" * 43 + "=",
    "server_key": "B" * 43 + "=",
}
BAD_FILES = [
    ("users: [\n", "not valid YAML at line"),
    ({"users": {"alice": {"SCRAM-SHA-256": GOOD | {"iterations": 1000}}}},
     "users.alice.SCRAM-SHA-256.iterations: Input should be greater than or equal to 4096"),
    ({"users": {"alice": {"SCRAM-SHA-256": GOOD | {"salt": "not base64!"}}}},
     "users.alice.SCRAM-SHA-256.salt: not valid base64"),
    ({"users": {"alice": {"SCRAM-SHA-1": GOOD}}}, "users.alice.SCRAM-SHA-1"),
    ({"users": {"alice": {"SCRAM-SHA-256": GOOD | {"password": "x"}}}}, "users.alice.SCRAM-SHA-256.password"),
    ({"users": {"alice": {"SCRAM-SHA-512": GOOD}}},
     "users.alice.SCRAM-SHA-512: stored_key and server_key must be 64 bytes"),
    ({"user": {}}, "users: Field required"),
]  # fmt: skip


@pytest.mark.parametrize(("content", "error"), BAD_FILES)
def test_bad_files_are_refused_in_one_line(tmp_path: Path, content: object, error: str) -> None:
    path = tmp_path / "credentials.yaml"
    path.write_text(content if isinstance(content, str) else yaml.safe_dump(content), encoding="utf-8")
    with pytest.raises(CredentialsError) as caught:
        load_credentials(path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(str(path)) and error in message


def test_a_good_hand_written_entry_loads_and_a_missing_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "credentials.yaml"
    path.write_text(yaml.safe_dump({"users": {"alice": {"SCRAM-SHA-256": GOOD}}}), encoding="utf-8")
    assert load_credentials(path).lookup("SCRAM-SHA-256", "alice") is not None
    with pytest.raises(CredentialsError, match="no such credentials file"):
        load_credentials(tmp_path / "absent.yaml")
