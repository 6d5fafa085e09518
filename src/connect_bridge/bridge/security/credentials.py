"""The credentials file of terminated SASL: SCRAM credentials per user, as Kafka stores them.

Why Kafka's form: an operator migrating users from a cluster knows it (``kafka-configs --describe
--entity-type users`` shows the same salt/iterations/stored_key/server_key), and a leaked file gives
no password, only what a dictionary attack can start from; so the file is still written ``0600``.
PLAIN logins are checked against these same credentials (``scram.PlainServer``), so one file serves
PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 without a plaintext password anywhere.

Format (YAML; base64 is standard with padding, as Kafka prints it)::

    users:
      alice:
        SCRAM-SHA-256: {salt: <b64>, iterations: 4096, stored_key: <b64>, server_key: <b64>}
        SCRAM-SHA-512: {salt: <b64>, iterations: 4096, stored_key: <b64>, server_key: <b64>}

Interface:

- ``load_credentials(path) -> CredentialStore`` (``CredentialsError``: one line naming the file and
  the field, e.g. ``creds.yaml: users.alice.SCRAM-SHA-256.iterations: ...``).
- ``CredentialStore.lookup(mechanism, user) -> ScramCredential | None`` is a ``scram.CredentialLookup``;
  ``.plain_check()`` is what a PLAIN login costs here (``scram.PlainCheck``, for unknown users).
- ``CredentialStore.with_user(user, password, mechanisms=DEFAULT_MECHANISMS, iterations=4096)`` and
  ``.without_user(user)`` return new stores; ``.to_yaml()`` renders one.
- ``save_credentials(store, path)`` writes atomically with mode 0600; ``add_user(path, user,
  password, ...)`` loads (or starts) the file, adds or replaces the user, saves, and returns the store.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import os
import tempfile
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from connect_bridge.bridge.security.file_modes import writable_by_others
from connect_bridge.bridge.security.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    PLAIN_CHECK_ORDER,
    SCRAM_MECHANISMS,
    PlainCheck,
    ScramCredential,
    make_credential,
)
from connect_bridge.bridge.validation import format_validation_error

__all__ = [
    "DEFAULT_MECHANISMS",
    "CredentialStore",
    "CredentialsError",
    "add_user",
    "load_credentials",
    "save_credentials",
]

DEFAULT_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
Mechanism = Literal["SCRAM-SHA-256", "SCRAM-SHA-512"]


class CredentialsError(ValueError):
    """A credentials file that cannot be used, as one line naming the file."""


def _b64(value: Any) -> bytes:
    if not isinstance(value, str):
        raise ValueError("expected a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error:
        raise ValueError("not valid base64") from None


B64Bytes = Annotated[bytes, BeforeValidator(_b64)]


class _StoredCredential(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    salt: B64Bytes = Field(min_length=1)
    iterations: int = Field(ge=MIN_ITERATIONS, le=MAX_ITERATIONS)
    stored_key: B64Bytes
    server_key: B64Bytes


class _CredentialsFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    users: dict[Annotated[str, Field(min_length=1)], dict[Mechanism, _StoredCredential]]


@dataclasses.dataclass(frozen=True)
class CredentialStore:
    """Users and their SCRAM credentials, read-only (changes return a new store)."""

    users: Mapping[str, Mapping[str, ScramCredential]] = dataclasses.field(
        default_factory=lambda: MappingProxyType({})
    )

    def lookup(self, mechanism: str, user: str) -> ScramCredential | None:
        """The stored credential of ``user`` for ``mechanism``, if any."""
        return self.users.get(user, {}).get(mechanism)

    def with_user(
        self,
        user: str,
        password: str,
        mechanisms: Iterable[str] = DEFAULT_MECHANISMS,
        iterations: int = MIN_ITERATIONS,
    ) -> CredentialStore:
        """A store where ``user`` has fresh credentials (new salt) for ``mechanisms`` only."""
        if not user:
            raise ValueError("the user name must not be empty")
        if not password:
            raise ValueError("the password must not be empty")
        unknown = sorted(set(mechanisms) - SCRAM_MECHANISMS.keys())
        if unknown:
            raise ValueError(f"unknown mechanism {unknown[0]}; use {' or '.join(SCRAM_MECHANISMS)}")
        fresh = {m: make_credential(m, password, iterations) for m in mechanisms}
        if not fresh:
            raise ValueError("name at least one mechanism")
        return CredentialStore(MappingProxyType({**self.users, user: MappingProxyType(fresh)}))

    def plain_check(self) -> PlainCheck:
        """The KDF a PLAIN login of a typical user here costs (the credential PLAIN checks: SCRAM-SHA-512,
        else SCRAM-SHA-256; the most common hash and iteration count among the users), which an unknown
        user's refusal then costs too (``scram.PlainCheck``)."""
        seen: Counter[tuple[str, int]] = Counter()
        for by_mechanism in self.users.values():
            for mechanism in PLAIN_CHECK_ORDER:
                credential = by_mechanism.get(mechanism)
                if credential is not None:
                    seen[(mechanism, credential.iterations)] += 1
                    break
        if not seen:
            return PlainCheck()
        (mechanism, iterations), _ = seen.most_common(1)[0]
        return PlainCheck(mechanism, iterations)

    def without_user(self, user: str) -> CredentialStore:
        return CredentialStore(MappingProxyType({u: c for u, c in self.users.items() if u != user}))

    def to_yaml(self) -> str:
        """The file's text: Kafka's four values per user and mechanism."""

        def b64(data: bytes) -> str:
            return base64.b64encode(data).decode("ascii")

        users = {
            user: {
                mechanism: {
                    "salt": b64(c.salt),
                    "iterations": c.iterations,
                    "stored_key": b64(c.stored_key),
                    "server_key": b64(c.server_key),
                }
                for mechanism, c in sorted(by_mechanism.items())
            }
            for user, by_mechanism in sorted(self.users.items())
        }
        header = (
            "# connect-bridge SASL credentials: SCRAM salt/iterations/StoredKey/ServerKey, no passwords.\n"
        )
        return header + yaml.safe_dump({"users": users}, sort_keys=False)


def load_credentials(path: Path) -> CredentialStore:
    """Read and validate ``path``; ``CredentialsError`` with one line otherwise."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CredentialsError(f"{path}: no such credentials file") from None
    except OSError as exc:
        raise CredentialsError(f"{path}: cannot read the credentials file ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        raise CredentialsError(f"{path}: not valid YAML{line}") from None
    unsafe = writable_by_others(path)
    if unsafe is not None:  # others could add themselves a user (file_modes.py)
        raise CredentialsError(f"{path}: refused: {unsafe}")
    try:
        parsed = _CredentialsFile.model_validate(raw if raw is not None else {"users": {}})
    except ValidationError as exc:
        raise CredentialsError(format_validation_error(str(path), exc)) from None
    for user, by_mechanism in parsed.users.items():
        for mechanism, stored in by_mechanism.items():
            size = hashlib.new(SCRAM_MECHANISMS[mechanism]).digest_size
            if len(stored.stored_key) != size or len(stored.server_key) != size:
                raise CredentialsError(
                    f"{path}: users.{user}.{mechanism}: stored_key and server_key must be {size} bytes"
                )
    return CredentialStore(
        MappingProxyType(
            {
                user: MappingProxyType(
                    {
                        m: ScramCredential(s.salt, s.iterations, s.stored_key, s.server_key)
                        for m, s in by_mechanism.items()
                    }
                )
                for user, by_mechanism in parsed.users.items()
            }
        )
    )


def save_credentials(store: CredentialStore, path: Path) -> None:
    """Write ``store`` to ``path`` atomically (temp file + rename), readable by the owner only."""
    handle, staged = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(store.to_yaml())
        os.chmod(staged, 0o600)
        os.replace(staged, path)
    except BaseException:
        Path(staged).unlink(missing_ok=True)
        raise


def add_user(
    path: Path,
    user: str,
    password: str,
    mechanisms: Iterable[str] = DEFAULT_MECHANISMS,
    iterations: int = MIN_ITERATIONS,
) -> CredentialStore:
    """Add or replace ``user`` in the file at ``path`` (created if missing); the new store."""
    store = load_credentials(path) if path.exists() else CredentialStore()
    updated = store.with_user(user, password, mechanisms, iterations)
    save_credentials(updated, path)
    return updated
