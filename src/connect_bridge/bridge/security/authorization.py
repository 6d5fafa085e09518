"""Group authorization wired into the server: the ``authorization:`` settings, the authorizer the
group handlers ask, and where its rules come from (docs/security.md "Authorization wired").

Why here and not in ``acls.py``: ``acls`` is the pure decision (Kafka's ``StandardAuthorizer``
semantics, table-tested); this module adds what a running bridge needs around it: the rules' source
(the ACL file, or the upstream cluster's own ACLs read with DescribeAcls as the bridge's own
``upstream_sasl`` identity and refreshed every ``refresh_ms``), a metric per decision
(``connect_bridge_authorization_decisions_total{operation,result}``) and a structured log line per
denial, rate-limited per (principal, operation, group) because a refused worker retries every
heartbeat interval.

Fail closed: until the first upstream read succeeds there are no rules, so only super users get
in; a later failed refresh keeps the last rules read (logged once per failure streak), since
dropping them would lock every worker out for a transient broker outage.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from connect_bridge.bridge.metrics import Metrics, log_event
from connect_bridge.bridge.security.acls import (
    AclRule,
    AclSourceError,
    GroupAcls,
    Operation,
    describe_group_acls_request,
    load_acl_file,
    rules_from_describe_acls,
)

log = logging.getLogger("connect_bridge.authorization")

__all__ = [
    "AuthorizationSettings",
    "GroupAuthorizer",
    "authorizer_from_settings",
    "fetch_upstream_rules",
    "refresh_from_upstream",
]

DENIAL_LOG_INTERVAL_S = 10.0
"""A denial of one (principal, operation, group) is logged at most this often (with a count)."""


class AuthorizationSettings(BaseModel):
    """``authorization:``: who may use which group the bridge coordinates (Kafka's group ACLs)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    acl_file: Path | None = None
    """Rules in the format ``kafka-acls.sh --list`` prints (``acls.load_acl_file``); read at start."""
    from_upstream: bool = False
    """Read the upstream cluster's GROUP ACLs with DescribeAcls, as the bridge's own identity
    (``upstream_sasl``; it needs DESCRIBE on the CLUSTER), every ``refresh_ms``."""
    refresh_ms: int = Field(60000, gt=0)
    super_users: list[str] = []
    """Kafka's ``super.users``: principals allowed everything (``User:admin``)."""
    allow_if_no_acls: bool = False
    """Kafka's ``allow.everyone.if.no.acl.found``: a group no rule names is open to everyone."""

    @field_validator("super_users")
    @classmethod
    def _principals(cls, value: list[str]) -> list[str]:
        for principal in value:
            kind, _, name = principal.partition(":")
            if not kind or not name:
                raise ValueError(f"super user {principal!r} is not a principal such as User:admin")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> AuthorizationSettings:
        if self.enabled and (self.acl_file is None) == (not self.from_upstream):
            raise ValueError("authorization.enabled needs exactly one of acl_file and from_upstream")
        return self


class GroupAuthorizer:
    """Answers "may this principal do this to this group?" for the group handlers; counts and logs."""

    def __init__(
        self,
        rules: Iterable[AclRule],
        *,
        super_users: Iterable[str] = (),
        allow_if_no_acls: bool = False,
        metrics: Metrics | None = None,
        source: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._super_users = frozenset(super_users)
        self._allow_if_no_acls = allow_if_no_acls
        self.acls = GroupAcls(tuple(rules), allow_if_no_acls=allow_if_no_acls, super_users=self._super_users)
        self.metrics = metrics
        self.source = source
        """Where the rules come from, for the logs (the ACL file, or "upstream")."""
        self._clock = clock
        self._denials: dict[tuple[str, str, str], tuple[float, int]] = {}
        """(principal, operation, group) -> (when last logged, denials since)."""
        self._counters: dict[tuple[str, str], Any] = {}

    @property
    def rules(self) -> tuple[AclRule, ...]:
        return tuple(self.acls.rules)

    def replace_rules(self, rules: Iterable[AclRule]) -> None:
        """New rules (an upstream refresh); decisions from now on use them."""
        self.acls = GroupAcls(
            tuple(rules), allow_if_no_acls=self._allow_if_no_acls, super_users=self._super_users
        )

    def allowed(self, principal: str, host: str, operation: Operation, group_id: str) -> bool:
        """Decide, count, and log a denial (allowed decisions at DEBUG only: one per heartbeat)."""
        decision = self.acls.authorize(principal, host, operation, group_id)
        result = "allowed" if decision.allowed else "denied"
        self._count(operation, result)
        if not decision.allowed:
            self._log_denial(principal, host, operation, group_id, decision.reason)
        elif log.isEnabledFor(logging.DEBUG):
            log.debug(
                "authorization allowed %s %s on group %s: %s", principal, operation, group_id, decision.reason
            )
        return decision.allowed

    def _count(self, operation: Operation, result: str) -> None:
        if self.metrics is None:
            return
        key = (str(operation), result)
        child = self._counters.get(key)
        if child is None:
            child = self._counters[key] = self.metrics.authorizations.labels(operation=key[0], result=result)
        child.inc()

    def _log_denial(
        self, principal: str, host: str, operation: Operation, group_id: str, reason: str
    ) -> None:
        key = (principal, str(operation), group_id)
        now = self._clock()
        last, suppressed = self._denials.get(key, (float("-inf"), 0))
        if now - last < DENIAL_LOG_INTERVAL_S:
            self._denials[key] = (last, suppressed + 1)
            return
        if len(self._denials) > 10_000:  # bounded: a client can make up group ids at will
            self._denials.clear()
        self._denials[key] = (now, 0)
        log_event(
            log,
            "authorization_denied",
            principal=principal,
            host=host,
            operation=str(operation),
            group=group_id,
            reason=reason,
            suppressed=suppressed,
        )


def authorizer_from_settings(
    settings: AuthorizationSettings, metrics: Metrics | None
) -> GroupAuthorizer | None:
    """The authorizer ``settings`` ask for, or None when authorization is off.

    An ACL file is read now (``AclFileError``: one line naming the file and line); upstream rules
    start empty (fail closed) and come with :func:`refresh_from_upstream`.
    """
    if not settings.enabled:
        return None
    rules: tuple[AclRule, ...] = ()
    source = "upstream"
    if settings.acl_file is not None:
        rules = load_acl_file(settings.acl_file)
        source = str(settings.acl_file)
    authorizer = GroupAuthorizer(
        rules,
        super_users=settings.super_users,
        allow_if_no_acls=settings.allow_if_no_acls,
        metrics=metrics,
        source=source,
    )
    log.info(
        "authorization on: %d group ACLs from %s, %d super users, allow_if_no_acls=%s",
        len(rules),
        source,
        len(settings.super_users),
        settings.allow_if_no_acls,
    )
    return authorizer


def fetch_upstream_rules(
    bootstrap: str, client_options: dict[str, Any], timeout_ms: int = 30000
) -> tuple[AclRule, ...]:
    """The upstream cluster's GROUP ACLs (blocking: run it in a thread).

    ``client_options`` are the bridge's own kafka-python security options
    (``UpstreamSecurity.kafka_python_options()``: TLS and the ``upstream_sasl`` identity). The raw
    DescribeAcls response is what ``acls.rules_from_describe_acls`` converts (tested against the
    broker's own answers), so it is sent through the admin client's connection manager rather than
    its ``describe_acls``, which converts to objects of its own. ``AclSourceError`` (one line) when
    the cluster refuses (no authorizer: SECURITY_DISABLED; no DESCRIBE on the CLUSTER) or cannot
    be reached."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    try:
        admin = KafkaAdminClient(
            bootstrap_servers=bootstrap,
            client_id="connect-bridge-acls",
            request_timeout_ms=timeout_ms,
            **client_options,
        )
    except KafkaError as exc:
        raise AclSourceError(f"cannot reach the upstream cluster for DescribeAcls: {exc}") from None
    try:
        response = admin._manager.run(admin._manager.send, describe_group_acls_request())
    except KafkaError as exc:
        raise AclSourceError(f"DescribeAcls failed: {exc}") from None
    finally:
        admin.close()
    return rules_from_describe_acls(response)


async def refresh_from_upstream(
    authorizer: GroupAuthorizer,
    fetch: Callable[[], tuple[AclRule, ...]],
    refresh_ms: int,
    loaded: asyncio.Event | None = None,
) -> None:
    """Read the upstream ACLs now and every ``refresh_ms`` until cancelled.

    A failed read keeps the rules read last (before the first success: none, so only super users
    pass) and is logged once per streak of failures, not once per attempt."""
    failing = False
    while True:
        try:
            rules = await asyncio.to_thread(fetch)
        except AclSourceError as exc:
            if not failing:
                log.warning(
                    "cannot read the group ACLs from upstream (keeping %d rules): %s",
                    len(authorizer.rules),
                    exc,
                )
            failing = True
        else:
            if failing or set(rules) != set(authorizer.rules):
                log.info("group ACLs from upstream: %d rules", len(rules))
            failing = False
            authorizer.replace_rules(rules)
            if loaded is not None:
                loaded.set()
        await asyncio.sleep(refresh_ms / 1000)
