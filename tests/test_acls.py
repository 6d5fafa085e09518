"""Group ACLs (``bridge/security/acls.py``): Kafka's authorizer semantics, table-driven, and both rule
sources."""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka.protocol.admin.acl import DescribeAclsRequest, DescribeAclsResponse

from connect_bridge.bridge.security.acls import (
    AclFileError,
    AclRule,
    AclSourceError,
    GroupAcls,
    Operation,
    PatternType,
    Permission,
    authorize,
    describe_group_acls_request,
    load_acl_file,
    parse_acl_listing,
    rules_from_describe_acls,
)

ALLOW, DENY = Permission.ALLOW, Permission.DENY
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
READ, DESCRIBE, ALL = Operation.READ, Operation.DESCRIBE, Operation.ALL


def rule(
    principal: str, operation: Operation, permission: Permission, name: str,
    pattern: PatternType = LITERAL, host: str = "*",
) -> AclRule:  # fmt: skip
    return AclRule(principal, host, operation, permission, pattern, name)


RULES = (
    rule("User:alice", READ, ALLOW, "connect-a"),
    rule("User:bob", DESCRIBE, ALLOW, "connect-a"),
    rule("User:*", DESCRIBE, ALLOW, "public-", PREFIXED),
    rule("User:carol", ALL, ALLOW, "team-c-", PREFIXED),
    rule("User:carol", READ, DENY, "team-c-secret"),
    rule("User:dave", READ, ALLOW, "dave-", PREFIXED, host="10.0.0.5"),
    rule("User:erin", Operation.WRITE, ALLOW, "connect-a"),
    rule("User:frank", READ, ALLOW, "connect-a"),
    rule("User:frank", DESCRIBE, DENY, "connect-a"),
    rule("User:*", ALL, DENY, "locked"),
    rule("User:alice", READ, ALLOW, "locked"),
    rule("Group:*", ALL, ALLOW, "by-type"),
    rule("User:gina", Operation.DELETE, ALLOW, "gina-", PREFIXED),
    rule("User:hank", READ, ALLOW, "hank", host="2001:db8::1"),
)

# (principal, host, operation, group, allowed, reason fragment)
CASES = [
    ("User:alice", "10.1.1.1", READ, "connect-a", True, "allowed by (principal=User:alice"),
    ("User:alice", "10.1.1.1", DESCRIBE, "connect-a", True, "operation=READ"),  # READ implies DESCRIBE
    ("User:bob", "10.1.1.1", DESCRIBE, "connect-a", True, "operation=DESCRIBE"),
    ("User:bob", "10.1.1.1", READ, "connect-a", False, "no ACL allows it"),  # DESCRIBE implies nothing
    ("User:zed", "10.1.1.1", DESCRIBE, "public-metrics", True, "principal=User:*"),
    ("User:zed", "10.1.1.1", READ, "public-metrics", False, "no ACL allows it"),
    ("User:zed", "10.1.1.1", DESCRIBE, "publicmetrics", False, "no ACLs on the group"),  # not the prefix
    ("User:carol", "10.1.1.1", READ, "team-c-1", True, "operation=ALL"),
    ("User:carol", "10.1.1.1", READ, "team-c-secret", False, "denied by"),  # DENY wins over ALLOW ALL
    ("User:carol", "10.1.1.1", DESCRIBE, "team-c-secret", True, "operation=ALL"),  # DENY READ is READ only
    ("User:dave", "10.0.0.5", READ, "dave-1", True, "host=10.0.0.5"),
    ("User:dave", "10.0.0.6", READ, "dave-1", False, "no ACL allows it"),
    ("User:erin", "10.1.1.1", DESCRIBE, "connect-a", True, "operation=WRITE"),  # WRITE implies DESCRIBE
    ("User:erin", "10.1.1.1", READ, "connect-a", False, "no ACL allows it"),
    ("User:frank", "10.1.1.1", READ, "connect-a", True, "allowed by"),
    ("User:frank", "10.1.1.1", DESCRIBE, "connect-a", False, "denied by"),  # implied ALLOW loses to DENY
    ("User:alice", "10.1.1.1", READ, "locked", False, "principal=User:*, host=*, operation=ALL"),
    ("User:alice", "10.1.1.1", READ, "by-type", False, "no ACL allows it"),  # Group:* is not User:*
    ("Group:ops", "10.1.1.1", READ, "by-type", True, "principal=Group:*"),
    ("User:gina", "10.1.1.1", DESCRIBE, "gina-1", True, "operation=DELETE"),  # DELETE implies DESCRIBE
    ("User:hank", "2001:0db8:0:0::1", READ, "hank", True, "host=2001:db8::1"),  # addresses compared as such
    ("User:mallory", "10.1.1.1", READ, "nobody-wrote-acls", False, "allow.everyone.if.no.acl.found is false"),
]


@pytest.mark.parametrize(("principal", "host", "operation", "group", "allowed", "reason"), CASES)
def test_kafka_semantics(
    principal: str, host: str, operation: Operation, group: str, allowed: bool, reason: str
) -> None:
    decision = authorize(RULES, principal, host, operation, group)
    assert decision.allowed is allowed, decision.reason
    assert reason in decision.reason
    assert (decision.rule is not None) == ("by (" in decision.reason)


def test_allow_if_no_acls_only_where_no_rule_applies() -> None:
    acls = GroupAcls(RULES, allow_if_no_acls=True)
    assert acls.authorize("User:mallory", "10.1.1.1", READ, "nobody-wrote-acls").allowed
    assert not acls.authorize("User:mallory", "10.1.1.1", READ, "connect-a").allowed
    assert not acls.authorize("User:mallory", "10.1.1.1", READ, "public-x").allowed  # prefixed rule applies


def test_literal_wildcard_resource_applies_to_every_group() -> None:
    rules = (
        rule("User:dave", READ, ALLOW, "*"),
        rule("User:eve", ALL, DENY, "*"),
        rule("User:eve", READ, ALLOW, "eve-group"),
    )
    assert authorize(rules, "User:dave", "10.1.1.1", READ, "any-group").allowed
    assert not authorize(rules, "User:eve", "10.1.1.1", READ, "eve-group").allowed  # DENY on * wins
    # The wildcard rule applies to every group, so allow.everyone.if.no.acl.found never kicks in.
    decision = authorize(rules, "User:zed", "10.1.1.1", READ, "any-group", allow_if_no_acls=True)
    assert not decision.allowed and "no ACL allows it" in decision.reason


def test_super_users_bypass_every_rule() -> None:
    acls = GroupAcls(RULES, super_users=frozenset({"User:admin"}))
    decision = acls.authorize("User:admin", "10.1.1.1", READ, "locked")
    assert decision.allowed and "super user" in decision.reason
    assert not acls.authorize("User:alice", "10.1.1.1", READ, "locked").allowed


def test_no_rules_means_denied_by_default() -> None:
    assert not GroupAcls().authorize("User:alice", "127.0.0.1", DESCRIBE, "g").allowed


LISTING = """\
# dumped with: kafka-acls.sh --bootstrap-server ... --list --group '*'
Current ACLs for resource `ResourcePattern(resourceType=GROUP, name=connect-a, patternType=LITERAL)`: \n\
 \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)
 \t(principal=User:CN=bob,OU=ops, host=10.0.0.5, operation=DESCRIBE, permissionType=ALLOW) \n\

ACLs for principal `User:carol`
Current ACLs for resource `ResourcePattern(resourceType=GROUP, name=team-c-, patternType=PREFIXED)`: \n\
 \t(principal=User:carol, host=*, operation=ALL, permissionType=ALLOW)
 \t(principal=User:*, host=*, operation=READ, permissionType=DENY) \n\
"""
LISTED = (
    rule("User:alice", READ, ALLOW, "connect-a"),
    rule("User:CN=bob,OU=ops", DESCRIBE, ALLOW, "connect-a", host="10.0.0.5"),
    rule("User:carol", ALL, ALLOW, "team-c-", PREFIXED),
    rule("User:*", READ, DENY, "team-c-", PREFIXED),
)


def test_acl_file_is_kafka_acls_list_output(tmp_path: Path) -> None:
    path = tmp_path / "acls.txt"
    path.write_text(LISTING, encoding="utf-8")
    rules = load_acl_file(path)
    assert rules == LISTED
    assert str(rules[1]) == (
        "(principal=User:CN=bob,OU=ops, host=10.0.0.5, operation=DESCRIBE, permissionType=ALLOW) "
        "on ResourcePattern(resourceType=GROUP, name=connect-a, patternType=LITERAL)"
    )
    assert not authorize(rules, "User:carol", "10.1.1.1", READ, "team-c-x").allowed


HEADER = "Current ACLs for resource `ResourcePattern(resourceType=GROUP, name=g, patternType=LITERAL)`:"
ENTRY = "(principal=User:a, host=*, operation=READ, permissionType=ALLOW)"
BAD_LISTINGS = [
    (ENTRY, 1, "an ACL before any 'Current ACLs for resource' line"),
    (HEADER.replace("GROUP", "TOPIC"), 1, "resourceType=TOPIC: the bridge only uses GROUP ACLs"),
    (HEADER.replace("LITERAL", "MATCH"), 1, "unknown patternType 'MATCH'"),
    (f"{HEADER}\n{ENTRY.replace('READ', 'JOIN')}", 2, "unknown operation 'JOIN'"),
    (f"{HEADER}\n{ENTRY.replace('ALLOW', 'PERMIT')}", 2, "unknown permissionType 'PERMIT'"),
    (f"{HEADER}\n{ENTRY.replace('User:a', 'alice')}", 2, "must be <type>:<name>"),
    (f"{HEADER}\n\n{ENTRY}\nallow alice read g", 4, "expected 'Current ACLs for resource"),
]


@pytest.mark.parametrize(("text", "line", "error"), BAD_LISTINGS)
def test_bad_acl_files_name_the_line(tmp_path: Path, text: str, line: int, error: str) -> None:
    path = tmp_path / "acls.txt"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(AclFileError) as caught:
        load_acl_file(path)
    assert str(caught.value).startswith(f"{path}:{line}: ") and error in str(caught.value)
    assert "\n" not in str(caught.value)


def test_missing_acl_file() -> None:
    with pytest.raises(AclFileError, match="no such ACL file"):
        load_acl_file(Path("/nonexistent/acls.txt"))


Resource = DescribeAclsResponse.DescribeAclsResource
Acl = Resource.AclDescription


def _wire(response: DescribeAclsResponse, version: int = 1) -> DescribeAclsResponse:
    """Through the wire format, as it would arrive from a broker."""
    return DescribeAclsResponse.decode(response.encode(version=version), version=version)


def test_describe_acls_response_gives_the_same_rules_as_the_listing() -> None:
    response = DescribeAclsResponse(
        throttle_time_ms=0, error_code=0, error_message=None,
        resources=[
            Resource(resource_type=3, resource_name="connect-a", pattern_type=3, acls=[
                Acl(principal="User:alice", host="*", operation=3, permission_type=3),
                Acl(principal="User:CN=bob,OU=ops", host="10.0.0.5", operation=8, permission_type=3),
            ]),
            Resource(resource_type=2, resource_name="connect-a", pattern_type=3, acls=[  # a TOPIC: skipped
                Acl(principal="User:*", host="*", operation=2, permission_type=2),
            ]),
            Resource(resource_type=3, resource_name="team-c-", pattern_type=4, acls=[
                Acl(principal="User:carol", host="*", operation=2, permission_type=3),
                Acl(principal="User:*", host="*", operation=3, permission_type=2),
            ]),
        ],
    )  # fmt: skip
    assert rules_from_describe_acls(_wire(response)) == LISTED == parse_acl_listing(LISTING)


def test_describe_acls_errors_are_reported() -> None:
    response = DescribeAclsResponse(
        throttle_time_ms=0, error_code=54, error_message="No Authorizer is configured.", resources=[]
    )
    with pytest.raises(AclSourceError, match="SecurityDisabledError: No Authorizer is configured"):
        rules_from_describe_acls(_wire(response))


def test_the_request_asks_for_every_group_acl() -> None:
    request = describe_group_acls_request()
    decoded = DescribeAclsRequest.decode(request.encode(version=1), version=1)
    assert (decoded.resource_type_filter, decoded.pattern_type_filter) == (3, 1)  # GROUP, ANY pattern
    assert (decoded.operation, decoded.permission_type) == (1, 1)  # ANY, ANY
    assert decoded.resource_name_filter is None and decoded.principal_filter is None
