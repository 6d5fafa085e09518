"""``adoption:``: which groups the bridge may take over from the upstream coordinator, and when.

Adoption (issue 16, docs/adoption.md) puts the bridge in front of a running Connect cluster without
a split brain: a group matching ``groups`` that exists upstream is relayed and observed until every
member is behind the bridge, then taken over at a generation boundary. Off unless ``groups`` is set.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class AdoptionSettings(BaseModel):
    """``adoption:`` (docs/adoption.md "Configuration")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    groups: str | None = Field(None, min_length=1)
    """A regex (full match) of the group ids the bridge may adopt; None: adoption is off."""
    mode: Literal["auto", "command"] = "auto"
    """``auto``: take a group over as soon as the takeover condition holds; ``command``: only when
    ``connect-bridge adopt GROUP`` asks (and the condition holds then)."""
    check_interval_ms: int = Field(1000, gt=0)
    """How often the condition is re-checked against the upstream's DescribeGroups (besides after
    every relayed exchange), and how often an adopted group's upstream is watched for a conflict."""
    settle_timeout_ms: int = Field(5000, gt=0)
    """How long a takeover waits, holding the group's new requests, for its relayed requests already
    in flight to be answered; past it the takeover is abandoned and relaying goes on."""
    leave_upstream: bool = True
    """After a takeover, empty the upstream group at once with a LeaveGroup of the adopted member
    ids (else it empties when their sessions expire there)."""

    @field_validator("groups")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {exc}") from None
        return value

    @property
    def enabled(self) -> bool:
        return self.groups is not None

    def watches(self, group_id: str) -> bool:
        """Whether ``group_id`` may be adopted (a full match of ``groups``)."""
        return self.groups is not None and re.fullmatch(self.groups, group_id) is not None


__all__ = ["AdoptionSettings"]
