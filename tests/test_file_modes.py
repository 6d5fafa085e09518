"""Files others could change are refused (``file_modes.py``), and /metrics can leave group ids out.

The credentials file says which passwords open the bridge and the ACL file who may join which group:
if another local user can write either (or replace it through its directory), the bridge must not
load it, as ssh refuses such an ``authorized_keys``. And /metrics, readable by whoever reaches the
metrics listener, names every group unless ``metrics_group_ids: false``.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from connect_bridge.bridge.metrics import Metrics
from connect_bridge.bridge.security.acls import AclFileError, load_acl_file
from connect_bridge.bridge.security.credentials import (
    CredentialsError,
    CredentialStore,
    load_credentials,
    save_credentials,
)
from connect_bridge.bridge.settings import BridgeSettings

ACLS = (
    "Current ACLs for resource `ResourcePattern(resourceType=GROUP, name=connect-, patternType=PREFIXED)`:\n"
    """ \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)
"""
)


def credentials(path: Path) -> Path:
    save_credentials(CredentialStore().with_user("alice", "alice-secret"), path)
    return path


def acls(path: Path) -> Path:
    path.write_text(ACLS, encoding="utf-8")
    os.chmod(path, 0o644)
    return path


LOADERS = [(credentials, load_credentials, CredentialsError), (acls, load_acl_file, AclFileError)]


@pytest.mark.parametrize(("write", "load", "error"), LOADERS)
@pytest.mark.parametrize("mode", [0o666, 0o664, 0o646])
def test_a_file_others_can_write_is_refused(
    tmp_path: Path, write: object, load: object, error: type[Exception], mode: int
) -> None:
    path = write(tmp_path / "file")  # type: ignore[operator]
    assert load(path)  # type: ignore[operator]
    os.chmod(path, mode)
    with pytest.raises(error, match=r"refused: mode .* lets others change it: chmod go-w"):
        load(path)  # type: ignore[operator]


@pytest.mark.parametrize(("write", "load", "error"), LOADERS)
def test_a_file_in_a_directory_others_can_write_is_refused_unless_sticky(
    tmp_path: Path, write: object, load: object, error: type[Exception]
) -> None:
    shared = tmp_path / "open-to-all"
    shared.mkdir()
    path = write(shared / "file")  # type: ignore[operator]
    os.chmod(shared, 0o777)
    with pytest.raises(error, match="lets others replace it"):
        load(path)  # type: ignore[operator]
    os.chmod(shared, 0o1777)  # as /tmp: others cannot replace a file they do not own
    assert load(path)  # type: ignore[operator]


def test_metrics_can_leave_group_ids_out() -> None:
    assert BridgeSettings(metrics_group_ids=False).metrics_group_ids is False
    named, hidden = Metrics(), Metrics(group_ids=False)
    for metrics in (named, hidden):
        metrics.observe_group("connect-payments", 3, [("sessioned", "stable")])
        metrics.observe_group("connect-payments", 4, [("sessioned", "stable")])
        metrics.observe_ownership("connect-payments", "adopted")
    digest = "sha256:" + hashlib.sha256(b"connect-payments").hexdigest()[:12]
    assert b'group="connect-payments"' in named.render()
    text = hidden.render()
    assert b"connect-payments" not in text
    assert f'connect_bridge_group_epoch{{group="{digest}"}} 4.0'.encode() in text
    assert f'connect_bridge_rebalances_total{{group="{digest}"}} 1.0'.encode() in text
    hidden.forget_group("connect-payments")
    assert f'connect_bridge_group_epoch{{group="{digest}"}}'.encode() not in hidden.render()
