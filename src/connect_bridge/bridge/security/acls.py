"""Group authorization as Kafka decides it: ACL rules for GROUP resources and one decision function.

Why Kafka's semantics exactly: the bridge stands in for the group coordinator, so a principal must
get the same answer from it as from the cluster it fronts, from the same rules. The decision is a
pure function of the rules and the request (no I/O, no clock), so it is table-tested here and the
server only supplies the principal, the peer address and the group.

Interface:

- ``AclRule(principal, host, operation, permission, pattern_type, name)``: one ACL on a GROUP
  resource; ``str()`` prints it as ``kafka-acls.sh`` does.
- ``authorize(rules, principal, host, operation, group_id, allow_if_no_acls=False,
  super_users=frozenset()) -> Decision(allowed, reason, rule)``; ``GroupAcls`` bundles the three
  settings with ``.authorize(principal, host, operation, group_id)``.
- Rule sources: ``load_acl_file(path) -> tuple[AclRule, ...]`` (``AclFileError``: one line with file
  and line number), ``parse_acl_listing(text, source)``, ``rules_from_describe_acls(response)`` for a
  kafka-python ``DescribeAclsResponse`` (``AclSourceError`` when it carries an error), and
  ``describe_group_acls_request()`` for the request that fetches every GROUP ACL.

Semantics (Kafka's ``StandardAuthorizer``/``StandardAuthorizerData``, the KRaft authorizer):

- A principal in ``super_users`` (Kafka's ``super.users``) is allowed everything.
- Rules apply to a group when LITERAL with its exact name, LITERAL ``*`` (any group), or PREFIXED
  with a prefix of its name (KIP-290).
- A rule matches a request when its principal is the request's or ``<type>:*`` of the same type
  (``User:*``), its host is ``*`` or the client's IP address, and its operation is ALL or the
  operation asked; an ALLOW of READ, WRITE, DELETE or ALTER also allows DESCRIBE (and ALTER_CONFIGS
  allows DESCRIBE_CONFIGS), a DENY denies only the operation it names (or ALL).
- Any matching DENY wins; else any matching ALLOW allows; else denied, except when no rule at all
  applies to the group and ``allow_if_no_acls`` (Kafka's ``allow.everyone.if.no.acl.found``,
  default false) is set.

What the bridge asks (for the lead wiring it; Kafka's own mapping): READ for JoinGroup, SyncGroup,
Heartbeat, LeaveGroup and the ConnectGroup* calls; DESCRIBE for DescribeGroups and for each group
ListGroups returns (Kafka lists only the groups the principal may describe, unless it may DESCRIBE
the CLUSTER; the bridge has no cluster rules, so it filters). Kafka's unauthenticated principal is
``User:ANONYMOUS``.

The ACL file is what ``kafka-acls.sh --list`` prints (so ``kafka-acls.sh ... --list --group G
--resource-pattern-type match > acls.txt``, every rule that applies to group G, is a valid file; a
``--group '*'`` lists only the rules of the literal name ``*``), plus ``#`` comments and blank
lines; only GROUP resources are allowed::

    Current ACLs for resource `ResourcePattern(resourceType=GROUP, name=connect-, patternType=PREFIXED)`:
        (principal=User:connect, host=*, operation=READ, permissionType=ALLOW)
        (principal=User:mallory, host=*, operation=ALL, permissionType=DENY)
"""

from __future__ import annotations

import dataclasses
import enum
import ipaddress
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kafka.errors import for_code
from kafka.protocol.admin.acl import (
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ACLResourceType,
    DescribeAclsRequest,
)

from connect_bridge.bridge.security.file_modes import writable_by_others

__all__ = [
    "AclFileError",
    "AclRule",
    "AclSourceError",
    "Decision",
    "GroupAcls",
    "Operation",
    "PatternType",
    "Permission",
    "authorize",
    "describe_group_acls_request",
    "load_acl_file",
    "parse_acl_listing",
    "rules_from_describe_acls",
]

WILDCARD = "*"


class Operation(enum.StrEnum):
    """Kafka's ``AclOperation`` names (the ones a rule may carry)."""

    ALL = "ALL"
    READ = "READ"
    WRITE = "WRITE"
    CREATE = "CREATE"
    DELETE = "DELETE"
    ALTER = "ALTER"
    DESCRIBE = "DESCRIBE"
    CLUSTER_ACTION = "CLUSTER_ACTION"
    DESCRIBE_CONFIGS = "DESCRIBE_CONFIGS"
    ALTER_CONFIGS = "ALTER_CONFIGS"
    IDEMPOTENT_WRITE = "IDEMPOTENT_WRITE"
    CREATE_TOKENS = "CREATE_TOKENS"
    DESCRIBE_TOKENS = "DESCRIBE_TOKENS"


class Permission(enum.StrEnum):
    ALLOW = "ALLOW"
    DENY = "DENY"


class PatternType(enum.StrEnum):
    LITERAL = "LITERAL"
    PREFIXED = "PREFIXED"


_IMPLIED_BY: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset(
        {Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}
    ),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}),
}
"""Kafka's IMPLIES_DESCRIBE and IMPLIES_DESCRIBE_CONFIGS: for ALLOW rules only."""


@dataclasses.dataclass(frozen=True)
class AclRule:
    """One ACL on a GROUP resource pattern."""

    principal: str
    host: str
    operation: Operation
    permission: Permission
    pattern_type: PatternType
    name: str

    def __str__(self) -> str:
        return (
            f"(principal={self.principal}, host={self.host}, operation={self.operation}, "
            f"permissionType={self.permission}) on ResourcePattern(resourceType=GROUP, name={self.name}, "
            f"patternType={self.pattern_type})"
        )

    def applies_to(self, group_id: str) -> bool:
        """Whether this rule's resource pattern covers ``group_id``."""
        if self.pattern_type is PatternType.PREFIXED:
            return group_id.startswith(self.name)
        return self.name in (group_id, WILDCARD)


@dataclasses.dataclass(frozen=True)
class Decision:
    """An authorization answer and why (``rule`` is the deciding rule, when one decided)."""

    allowed: bool
    reason: str
    rule: AclRule | None = None


def _principal_matches(rule_principal: str, principal: str) -> bool:
    if rule_principal == principal:
        return True
    rule_type, _, rule_name = rule_principal.partition(":")
    return rule_name == WILDCARD and principal.partition(":")[0] == rule_type


def _host_matches(rule_host: str, host: str) -> bool:
    if rule_host in (WILDCARD, host):
        return True
    try:
        return ipaddress.ip_address(rule_host) == ipaddress.ip_address(host)
    except ValueError:
        return False


def _operation_matches(rule: AclRule, operation: Operation) -> bool:
    if rule.operation in (Operation.ALL, operation):
        return True
    return rule.permission is Permission.ALLOW and rule.operation in _IMPLIED_BY.get(operation, frozenset())


def authorize(
    rules: Iterable[AclRule],
    principal: str,
    host: str,
    operation: Operation,
    group_id: str,
    allow_if_no_acls: bool = False,
    super_users: frozenset[str] = frozenset(),
) -> Decision:
    """May ``principal`` connecting from ``host`` (an IP address) do ``operation`` on ``group_id``?"""
    if principal in super_users:
        return Decision(True, f"{principal} is a super user")
    asked = f"{operation} on group {group_id!r} for {principal} from {host}"
    applicable = False
    allow: AclRule | None = None
    for rule in rules:
        if not rule.applies_to(group_id):
            continue
        applicable = True
        if not (
            _principal_matches(rule.principal, principal)
            and _host_matches(rule.host, host)
            and _operation_matches(rule, operation)
        ):
            continue
        if rule.permission is Permission.DENY:
            return Decision(False, f"{asked}: denied by {rule}", rule)
        allow = allow or rule
    if allow is not None:
        return Decision(True, f"{asked}: allowed by {allow}", allow)
    if not applicable:
        if allow_if_no_acls:
            return Decision(True, f"{asked}: no ACLs on the group and allow.everyone.if.no.acl.found")
        return Decision(False, f"{asked}: no ACLs on the group (allow.everyone.if.no.acl.found is false)")
    return Decision(False, f"{asked}: no ACL allows it")


@dataclasses.dataclass(frozen=True)
class GroupAcls:
    """Rules plus the two broker settings that change decisions."""

    rules: tuple[AclRule, ...] = ()
    allow_if_no_acls: bool = False
    super_users: frozenset[str] = frozenset()

    def authorize(self, principal: str, host: str, operation: Operation, group_id: str) -> Decision:
        return authorize(
            self.rules, principal, host, operation, group_id, self.allow_if_no_acls, self.super_users
        )


class AclFileError(ValueError):
    """An ACL file that cannot be used: ``<file>:<line>: <what is wrong>``."""


class AclSourceError(ValueError):
    """The upstream's DescribeAcls answered with an error (e.g. no authorizer configured)."""


_RESOURCE = re.compile(
    r"Current ACLs for resource `ResourcePattern\(resourceType=(?P<type>\w+), name=(?P<name>.*), "
    r"patternType=(?P<pattern>\w+)\)`:\s*"
)
_ENTRY = re.compile(
    r"\(principal=(?P<principal>.+), host=(?P<host>[^,\s]+), operation=(?P<operation>\w+), "
    r"permissionType=(?P<permission>\w+)\)\s*"
)
_IGNORED = re.compile(r"(?:#.*|ACLs for principal `.*`\s*|)")


def _member(enum_type: type[enum.StrEnum], value: str, what: str) -> Any:
    try:
        return enum_type(value)
    except ValueError:
        raise ValueError(f"unknown {what} {value!r} (one of {', '.join(enum_type)})") from None


def _entry_rule(match: re.Match[str], name: str, pattern_type: PatternType) -> AclRule:
    principal = match["principal"]
    kind, _, who = principal.partition(":")
    if not kind or not who:
        raise ValueError(f"principal {principal!r} must be <type>:<name>, e.g. User:alice or User:*")
    return AclRule(
        principal=principal,
        host=match["host"],
        operation=_member(Operation, match["operation"], "operation"),
        permission=_member(Permission, match["permission"], "permissionType"),
        pattern_type=pattern_type,
        name=name,
    )


def parse_acl_listing(text: str, source: str = "<acls>") -> tuple[AclRule, ...]:
    """The GROUP rules of a ``kafka-acls.sh --list`` output (see the module docstring)."""
    rules: list[AclRule] = []
    resource: tuple[str, PatternType] | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        try:
            if header := _RESOURCE.fullmatch(line):
                if header["type"] != "GROUP":
                    raise ValueError(f"resourceType={header['type']}: the bridge only uses GROUP ACLs")
                if not header["name"]:
                    raise ValueError("the resource name is empty")
                resource = (header["name"], _member(PatternType, header["pattern"], "patternType"))
            elif entry := _ENTRY.fullmatch(line):
                if resource is None:
                    raise ValueError("an ACL before any 'Current ACLs for resource' line")
                rules.append(_entry_rule(entry, *resource))
            elif not _IGNORED.fullmatch(line):
                raise ValueError(
                    "expected 'Current ACLs for resource `ResourcePattern(...)`:' or "
                    "'(principal=..., host=..., operation=..., permissionType=...)'"
                )
        except ValueError as exc:
            raise AclFileError(f"{source}:{number}: {exc}") from None
    return tuple(rules)


def load_acl_file(path: Path) -> tuple[AclRule, ...]:
    """Read and parse an ACL file; ``AclFileError`` (one line) when it cannot be used."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise AclFileError(f"{path}: no such ACL file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise AclFileError(f"{path}: cannot read the ACL file ({exc})") from None
    unsafe = writable_by_others(path)
    if unsafe is not None:  # others could grant themselves groups (file_modes.py)
        raise AclFileError(f"{path}: refused: {unsafe}")
    return parse_acl_listing(text, str(path))


def describe_group_acls_request() -> DescribeAclsRequest:
    """A DescribeAcls request for every ACL on GROUP resources (any name, pattern, principal, host)."""
    return DescribeAclsRequest(
        resource_type_filter=ACLResourceType.GROUP,
        resource_name_filter=None,
        pattern_type_filter=ACLResourcePatternType.ANY,
        principal_filter=None,
        host_filter=None,
        operation=ACLOperation.ANY,
        permission_type=ACLPermissionType.ANY,
    )


_PATTERN_TYPES = {
    ACLResourcePatternType.LITERAL: PatternType.LITERAL,
    ACLResourcePatternType.PREFIXED: PatternType.PREFIXED,
}
_PERMISSIONS = {ACLPermissionType.ALLOW: Permission.ALLOW, ACLPermissionType.DENY: Permission.DENY}


def rules_from_describe_acls(response: Any) -> tuple[AclRule, ...]:
    """The GROUP rules in a kafka-python ``DescribeAclsResponse`` (other resource types skipped)."""
    if response.error_code != 0:
        error = for_code(response.error_code)
        detail = f": {response.error_message}" if response.error_message else ""
        raise AclSourceError(f"DescribeAcls failed with {error.__name__}{detail}")
    rules: list[AclRule] = []
    for resource in response.resources:
        if resource.resource_type != ACLResourceType.GROUP:
            continue
        pattern_type = _PATTERN_TYPES.get(resource.pattern_type)
        if pattern_type is None:
            raise AclSourceError(f"DescribeAcls returned pattern type {resource.pattern_type} for a resource")
        for acl in resource.acls:
            permission = _PERMISSIONS.get(acl.permission_type)
            try:
                operation = Operation(ACLOperation(acl.operation).name)
            except ValueError:
                operation = None
            if permission is None or operation is None:
                raise AclSourceError(
                    f"DescribeAcls returned operation {acl.operation} / permission {acl.permission_type}"
                )
            rules.append(
                AclRule(acl.principal, acl.host, operation, permission, pattern_type, resource.resource_name)
            )
    return tuple(rules)
