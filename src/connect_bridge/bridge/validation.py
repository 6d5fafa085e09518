"""One line for a rejected YAML file: pydantic's problems as ``source: a.b: message``, and the key
an unknown one was meant to be.

Shared by the bridge's settings (``settings.py``), the config view file (``stores/config_source.py``)
and the credentials file (``security/credentials.py``), so all three tell an operator the same way.
"""

from __future__ import annotations

import difflib
import json
import re
from typing import Any, get_args

from pydantic import BaseModel, ValidationError

_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def format_validation_error(
    source: str,
    error: ValidationError,
    override_keys: frozenset[str] = frozenset(),
    root: type[BaseModel] | None = None,
) -> str:
    """One line for all of a ValidationError's problems: ``source: a.b: message; c: message``.

    Problems in a field that came from the command line are attributed to it, not to the file, so
    the operator looks in the right place. With ``root`` (the validated model), an unknown key
    names the nearest valid one. Shared with ``config_source``.
    """
    parts = []
    for detail in error.errors(include_url=False):
        path = _loc_path(detail["loc"])
        message = str(detail["msg"]).removeprefix("Value error, ")
        if detail["type"] == "extra_forbidden" and root is not None:
            message = unknown_key_message(root, detail["loc"])
        parts.append(f"{_origin(path, source, override_keys)}: {path or '(top level)'}: {message}")
    return "; ".join(parts)


def _section_at(root: type[BaseModel], loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The settings section that holds the key at ``loc`` (its last part), or None when unknown.
    List indexes and user-chosen dict keys (a connector's name) stay on the element's section."""
    model: type[BaseModel] | None = root
    for part in loc[:-1]:
        if model is None:
            return None
        field = model.model_fields.get(part) if isinstance(part, str) else None
        if field is not None:
            model = section_model(field.annotation)
    return model


def nearest_key(key: str, valid: list[str]) -> str | None:
    """The valid key an unknown ``key`` was most likely meant to be (a typo, a wrong separator), or
    None when none is close: ``advertized_host`` -> ``advertised_host``."""
    folded = {name.replace("-", "_").lower(): name for name in valid}
    wanted = key.replace("-", "_").lower()
    if wanted in folded:
        return folded[wanted]
    close = difflib.get_close_matches(wanted, list(folded), n=1, cutoff=0.75)
    return folded[close[0]] if close else None


def unknown_key_message(root: type[BaseModel], loc: tuple[int | str, ...]) -> str:
    """``unknown setting; did you mean advertised_host?`` for a key no section has (``extra``
    forbidden), naming the nearest valid key of that section when one is close."""
    model = _section_at(root, loc)
    key = loc[-1] if loc else ""
    guess = nearest_key(str(key), list(model.model_fields)) if model is not None else None
    return f"unknown setting; did you mean {guess}?" if guess else "unknown setting"


def _loc_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if part == "[key]":  # pydantic's marker for "the dict key itself", already in the path
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        elif not _PLAIN_KEY.match(part):  # a user-chosen key (connector name) that needs quoting
            out += f"[{json.dumps(part)}]"
        else:
            out += f".{part}" if out else part
    return out


def _origin(path: str, source: str, override_keys: frozenset[str]) -> str:
    if any(path == key or path.startswith((key + ".", key + "[")) for key in override_keys):
        return "command line"
    # A cross-field check on a section (heartbeat vs session timeout) may involve both sources.
    if any(not path or key.startswith(path + ".") for key in override_keys) and source != "command line":
        return f"{source} + command line"
    return source


def section_model(annotation: Any) -> type[BaseModel] | None:
    """The settings section a field holds (``X`` or ``X | None``), or None for a plain value."""
    for candidate in (annotation, *get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None
