"""Reading a Dockerfile and its ``.dockerignore`` strictly enough to check them without Docker.

``tests/test_packaging.py`` builds the image when a Docker daemon is reachable; everywhere else it
checks ``deploy/Dockerfile`` through this parser. It follows the Dockerfile reference's syntax
(comment lines, ``\\`` continuations, exec form as a JSON array, ``--flag=value`` options) and is
strict where Docker is lenient: an unknown or lower-case instruction, or an exec form that is not a
JSON array of strings, is an error naming the line, so a typo fails the test instead of the build.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

INSTRUCTIONS = frozenset(
    {
        "ADD", "ARG", "CMD", "COPY", "ENTRYPOINT", "ENV", "EXPOSE", "FROM", "HEALTHCHECK", "LABEL",
        "MAINTAINER", "ONBUILD", "RUN", "SHELL", "STOPSIGNAL", "USER", "VOLUME", "WORKDIR",
    }
)  # fmt: skip
_FLAG = re.compile(r"--(?P<name>[a-z-]+)(?:=(?P<value>\S*))?")


class DockerfileError(ValueError):
    """A line Docker would reject or misread: ``Dockerfile:LINE: what is wrong``."""


@dataclass(frozen=True)
class Instruction:
    """One instruction: its keyword, its ``--flags``, and the rest of its (joined) lines."""

    keyword: str
    flags: dict[str, str]
    args: str
    line: int

    def exec_form(self) -> list[str]:
        """The JSON-array (exec) form's arguments; an error for the shell form or broken JSON."""
        try:
            value = json.loads(self.args)
        except json.JSONDecodeError as exc:
            raise DockerfileError(
                f"Dockerfile:{self.line}: {self.keyword}: not a JSON array: {exc}"
            ) from None
        if not (isinstance(value, list) and all(isinstance(item, str) for item in value)):
            raise DockerfileError(f"Dockerfile:{self.line}: {self.keyword}: expected a JSON array of strings")
        return value

    def words(self) -> list[str]:
        """The arguments split on white space (COPY sources and destination, EXPOSE ports, ...)."""
        return self.exec_form() if self.args.startswith("[") else self.args.split()


def parse_dockerfile(text: str) -> list[Instruction]:
    """The instructions of ``text`` in order (comments dropped, continuation lines joined)."""
    instructions = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue  # Docker drops comment lines, also in the middle of a continued instruction
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1].strip())
            continue
        pending.append(stripped)
        instructions.append(_instruction(" ".join(part for part in pending if part), start))
        pending = []
    if pending:
        raise DockerfileError(f"Dockerfile:{start}: the last instruction ends with a continuation")
    return instructions


def _instruction(joined: str, line: int) -> Instruction:
    keyword, _, rest = joined.partition(" ")
    if keyword not in INSTRUCTIONS:
        raise DockerfileError(f"Dockerfile:{line}: unknown instruction {keyword!r} (upper case expected)")
    flags = {}
    rest = rest.strip()
    while match := _FLAG.match(rest):
        flags[match.group("name")] = match.group("value") or ""
        rest = rest[match.end() :].strip()
    return Instruction(keyword, flags, rest, line)


def stages(instructions: list[Instruction]) -> list[list[Instruction]]:
    """The build stages: each starts with its FROM."""
    if not instructions or instructions[0].keyword not in {"FROM", "ARG"}:
        raise DockerfileError("Dockerfile: must start with FROM")
    out: list[list[Instruction]] = []
    for instruction in instructions:
        if instruction.keyword == "FROM":
            out.append([])
        if out:
            out[-1].append(instruction)
    return out


def healthcheck_command(instruction: Instruction) -> list[str]:
    """``HEALTHCHECK [--options] CMD [...]``'s command, exec form only."""
    kind, _, command = instruction.args.partition(" ")
    if kind != "CMD":
        raise DockerfileError(f"Dockerfile:{instruction.line}: HEALTHCHECK needs CMD (or NONE)")
    return Instruction("CMD", {}, command.strip(), instruction.line).exec_form()


@dataclass(frozen=True)
class DockerIgnore:
    """``.dockerignore`` rules: the last matching pattern decides; ``!`` takes a path back in; a
    pattern matching a directory matches everything below it (Docker's semantics)."""

    rules: tuple[tuple[re.Pattern[str], bool], ...]

    @classmethod
    def read(cls, path: Path) -> DockerIgnore:
        rules = []
        for raw in path.read_text(encoding="utf-8").splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            negated = line.startswith("!")
            pattern = line.removeprefix("!").strip().strip("/")
            rules.append((_glob_regex(pattern), not negated))
        return cls(tuple(rules))

    def ignored(self, relative: str) -> bool:
        """Whether the file or directory ``relative`` (to the build context) is left out."""
        path = PurePosixPath(relative)
        candidates = [str(path), *(str(parent) for parent in path.parents if str(parent) != ".")]
        result = False
        for regex, excludes in self.rules:
            if any(regex.fullmatch(candidate) for candidate in candidates):
                result = excludes
        return result


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """Go's ``filepath.Match`` syntax plus Docker's ``**`` (any number of directories)."""
    out = ""
    index = 0
    while index < len(pattern):
        if pattern.startswith("**/", index):
            out += "(?:.*/)?"
            index += 3
        elif pattern.startswith("**", index):
            out += ".*"
            index += 2
        elif pattern[index] == "*":
            out += "[^/]*"
            index += 1
        elif pattern[index] == "?":
            out += "[^/]"
            index += 1
        else:
            out += re.escape(pattern[index])
            index += 1
    return re.compile(out)
