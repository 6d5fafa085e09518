"""The drill scenario file (docs/drills.md, a contract).

A scenario is what a drill replays: the workers that come and go, the config changes, and how long
to keep watching afterwards. It is validated up front, completely, so that a typo fails in one clear
line before a drill spends minutes of (simulated or real) time, instead of surfacing as a confusing
invariant failure at the end. Models are strict (``"5"`` is not an int, ``true`` is not an int) and
forbid unknown fields, because a misspelt optional field silently taking its default is exactly the
kind of drill that "passes" while testing nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, TypedDict

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

Protocol = Literal["eager", "compatible", "sessioned", "new"]
MigrationPolicy = Literal["bidirectional", "upgrade", "downgrade", "disabled"]

NonNegInt = Annotated[int, Field(ge=0)]
PosInt = Annotated[int, Field(gt=0)]
Name = Annotated[str, Field(min_length=1)]


class ScenarioError(ValueError):
    """A scenario that cannot be loaded. ``str(err)`` is one line: ``FILE: PATH: PROBLEM``."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class WorkerTiming(TypedDict):
    """A classic worker client's timing arguments (:meth:`Timing.worker_timing`)."""

    session_timeout_ms: int
    rebalance_timeout_ms: int
    heartbeat_interval_ms: int
    max_delay_ms: int


class Timing(_Model):
    """Group timing, the same knobs a Connect worker has (defaults are Connect's)."""

    session_timeout_ms: PosInt = 10000
    rebalance_timeout_ms: NonNegInt = 60000
    heartbeat_interval_ms: PosInt = 3000
    scheduled_rebalance_max_delay_ms: NonNegInt = 300000
    request_timeout_ms: PosInt = 40000
    """Connect's ``request.timeout.ms``: when a worker gives up on a lost response (JoinGroup waits
    the rebalance timeout + 5 s, as Java's client does)."""

    def worker_timing(self) -> WorkerTiming:
        """A classic worker client's timing arguments, in one place for the simulated worker and the
        live one (``max_delay_ms`` is Connect's ``scheduled.rebalance.max.delay.ms``)."""
        return {
            "session_timeout_ms": self.session_timeout_ms,
            "rebalance_timeout_ms": self.rebalance_timeout_ms,
            "heartbeat_interval_ms": self.heartbeat_interval_ms,
            "max_delay_ms": self.scheduled_rebalance_max_delay_ms,
        }


class _Step(_Model):
    at_ms: NonNegInt


class StartStep(_Step):
    """A worker process starts and joins the group speaking ``protocol``."""

    action: Literal["start"]
    worker: Name
    protocol: Protocol
    instance_id: Name | None = None
    """``group.instance.id`` (static membership). Another process may reuse one: the reused-id case."""


class StopStep(_Step):
    """Graceful shutdown: the worker stops its work and leaves the group."""

    action: Literal["stop"]
    worker: Name


class CrashStep(_Step):
    """The process dies: its work stops at once and it does not leave (the session expires)."""

    action: Literal["crash"]
    worker: Name


class RestartStep(_Step):
    """Graceful stop, back after ``down_ms``; a different ``protocol`` expresses up/downgrades."""

    action: Literal["restart"]
    worker: Name
    down_ms: NonNegInt
    protocol: Protocol | None = None


class AddConnectorStep(_Step):
    action: Literal["add_connector"]
    connector: Name
    tasks: NonNegInt


class RemoveConnectorStep(_Step):
    action: Literal["remove_connector"]
    connector: Name


class SetTasksStep(_Step):
    action: Literal["set_tasks"]
    connector: Name
    tasks: NonNegInt


class RestartBridgeStep(_Step):
    """The bridge process restarts and is unreachable for ``down_ms``."""

    action: Literal["restart_bridge"]
    down_ms: NonNegInt


class TakeoverBridgeStep(_Step):
    """High availability: the bridge stops answering (paused, not killed: connections stay open)
    and another bridge loads the group's records and takes over ``down_ms`` later. What the paused
    bridge had not answered is never answered: a worker waits its own timeout for it."""

    action: Literal["takeover_bridge"]
    down_ms: NonNegInt


class AdoptStep(_Step):
    """The bridge takes over the group it relays to the upstream coordinator (docs/adoption.md),
    at the first generation boundary that allows it (retried every second until then)."""

    action: Literal["adopt"]


class ReleaseStep(_Step):
    """The bridge hands an adopted group back to the upstream coordinator (retried every second
    while the group cannot be handed back yet, e.g. while a new-protocol worker is in it)."""

    action: Literal["release"]


class _Misbehaviour(_Step):
    """Adversarial behaviour of one running worker process (docs/drills.md, "Misbehaving workers")."""

    worker: Name


class StallStep(_Misbehaviour):
    """The herder thread stalls for ``duration_ms``: tasks keep running, no JoinGroup/SyncGroup is
    sent and no response handled; a legacy worker's heartbeat thread goes on heartbeating until the
    poll (rebalance) timeout, then sends LeaveGroup. A new-protocol worker stops heartbeating."""

    action: Literal["stall"]
    duration_ms: PosInt


class PauseStep(_Misbehaviour):
    """SIGSTOP for ``duration_ms``: nothing at all happens in the process, tasks stay (zombies)."""

    action: Literal["pause"]
    duration_ms: PosInt


class PartitionStep(_Misbehaviour):
    """The network between the worker and the bridge drops everything for ``duration_ms``; the
    worker sees its requests time out and reacts as its client does."""

    action: Literal["partition"]
    duration_ms: PosInt


class LoseResponsesStep(_Misbehaviour):
    """The next ``count`` responses to the worker are lost after the bridge applied the request;
    the worker times out (``request_timeout_ms``) and retries."""

    action: Literal["lose_responses"]
    count: PosInt


class DuplicateRequestsStep(_Misbehaviour):
    """The next ``count`` requests reach the bridge twice (a resend whose original was processed);
    the worker sees one answer (Kafka clients match correlation ids)."""

    action: Literal["duplicate_requests"]
    count: PosInt


class DuplicateResponsesStep(_Misbehaviour):
    """The next ``count`` responses to the worker are delivered twice. The second copy must be
    ignored as stale; one that would be taken for the answer to a newer request of the same kind is
    dropped, as a Kafka client's correlation-id check rejects it."""

    action: Literal["duplicate_responses"]
    count: PosInt


class DelaySyncStep(_Misbehaviour):
    """After its next successful JoinGroup the worker sends SyncGroup ``delay_ms`` late."""

    action: Literal["delay_sync"]
    delay_ms: PosInt


class SlowRevocationStep(_Misbehaviour):
    """Until ``duration_ms`` from now (unset: for the rest of this process's life), stopping revoked
    work takes ``delay_ms``: the items keep running and the herder is busy (no acknowledgement)."""

    action: Literal["slow_revocation"]
    delay_ms: PosInt
    duration_ms: PosInt | None = None


MISBEHAVIOURS = (
    StallStep,
    PauseStep,
    PartitionStep,
    LoseResponsesStep,
    DuplicateRequestsStep,
    DuplicateResponsesStep,
    DelaySyncStep,
    SlowRevocationStep,
)

Step = Annotated[
    StartStep
    | StopStep
    | CrashStep
    | RestartStep
    | AddConnectorStep
    | RemoveConnectorStep
    | SetTasksStep
    | RestartBridgeStep
    | TakeoverBridgeStep
    | AdoptStep
    | ReleaseStep
    | StallStep
    | PauseStep
    | PartitionStep
    | LoseResponsesStep
    | DuplicateRequestsStep
    | DuplicateResponsesStep
    | DelaySyncStep
    | SlowRevocationStep,
    Field(discriminator="action"),
]

STEP_MODELS: dict[str, type[_Step]] = {
    "start": StartStep,
    "stop": StopStep,
    "crash": CrashStep,
    "restart": RestartStep,
    "add_connector": AddConnectorStep,
    "remove_connector": RemoveConnectorStep,
    "set_tasks": SetTasksStep,
    "restart_bridge": RestartBridgeStep,
    "takeover_bridge": TakeoverBridgeStep,
    "adopt": AdoptStep,
    "release": ReleaseStep,
    "stall": StallStep,
    "pause": PauseStep,
    "partition": PartitionStep,
    "lose_responses": LoseResponsesStep,
    "duplicate_requests": DuplicateRequestsStep,
    "duplicate_responses": DuplicateResponsesStep,
    "delay_sync": DelaySyncStep,
    "slow_revocation": SlowRevocationStep,
}
"""Action name → step model, in the order the design lists them (used in error messages)."""


class _CrossFieldError(ValueError):
    """Raised by the cross-field validator; carries the field path so the one-line error can name it."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")


class _Replay:
    """Who runs and which connectors exist, step by step: what :meth:`Scenario._consistent` checks
    each step against (one method per kind of step, :data:`_REPLAY`)."""

    def __init__(self, connectors: set[str]) -> None:
        self.running: dict[str, int] = {}  # worker -> index of the step that (re)started it
        self.protocol: dict[str, str] = {}  # running worker -> its protocol (after a restart: then)
        self.down: dict[str, tuple[int, int]] = {}  # worker -> (restart step index, back at ms)
        self.gone: dict[str, int] = {}  # worker -> index of the step that stopped/crashed it
        self.connectors = connectors
        self.upstream = False  # the group starts at the upstream coordinator
        self.adopted = False

    def start(self, i: int, step: StartStep) -> None:
        if step.worker in self.running:
            since = f"started at steps[{self.running[step.worker]}]"
            raise _CrossFieldError(
                f"steps[{i}].worker", f"worker '{step.worker}' is already running ({since})"
            )
        self.running[step.worker] = i
        self.protocol[step.worker] = step.protocol
        self.gone.pop(step.worker, None)
        self.down.pop(step.worker, None)

    def misbehave(self, i: int, step: _Misbehaviour) -> None:
        action = getattr(step, "action", "")
        if step.worker not in self.running:
            raise _CrossFieldError(
                f"steps[{i}].worker", f"cannot {action} worker '{step.worker}': it is not running"
            )
        # A process that is down cannot misbehave: the simulator would skip the step silently.
        restart_at, back = self.down.get(step.worker, (-1, 0))
        if step.at_ms < back:
            raise _CrossFieldError(
                f"steps[{i}].at_ms",
                f"cannot {action} worker '{step.worker}' at {step.at_ms}: it is down until "
                f"{back} (restart at steps[{restart_at}])",
            )
        if isinstance(step, DelaySyncStep) and self.protocol[step.worker] == "new":
            raise _CrossFieldError(
                f"steps[{i}].action",
                f"delay_sync needs a classic-protocol worker; '{step.worker}' speaks new "
                "(it sends no SyncGroup)",
            )

    def leave(self, i: int, step: StopStep | CrashStep | RestartStep) -> None:
        """A stop, crash or restart: of a running worker only; a restarting worker stays running."""
        if step.worker not in self.running:
            gone = self.gone
            why = f"stopped at steps[{gone[step.worker]}]" if step.worker in gone else "never started"
            raise _CrossFieldError(
                f"steps[{i}].worker",
                f"cannot {step.action} worker '{step.worker}': it is not running ({why})",
            )
        if isinstance(step, RestartStep):
            self.down[step.worker] = (i, step.at_ms + step.down_ms)
            if step.protocol is not None:
                self.protocol[step.worker] = step.protocol
        else:
            del self.running[step.worker]
            self.gone[step.worker] = i

    def ownership(self, i: int, step: AdoptStep | ReleaseStep) -> None:
        """``adopt`` needs a group that starts upstream and is not adopted; ``release`` an adopted one."""
        if isinstance(step, AdoptStep):
            if not self.upstream:
                raise _CrossFieldError(
                    f"steps[{i}].action", "adopt needs upstream: true (the group starts upstream)"
                )
            if self.adopted:
                raise _CrossFieldError(f"steps[{i}].action", "the group is already adopted")
            self.adopted = True
        else:
            if not self.adopted:
                raise _CrossFieldError(f"steps[{i}].action", "release needs an adopt step before it")
            self.adopted = False

    def add_connector(self, i: int, step: AddConnectorStep) -> None:
        if step.connector in self.connectors:
            raise _CrossFieldError(f"steps[{i}].connector", f"connector '{step.connector}' already exists")
        self.connectors.add(step.connector)

    def change_connector(self, i: int, step: RemoveConnectorStep | SetTasksStep) -> None:
        if step.connector not in self.connectors:
            raise _CrossFieldError(f"steps[{i}].connector", f"unknown connector '{step.connector}'")
        if isinstance(step, RemoveConnectorStep):
            self.connectors.discard(step.connector)


_REPLAY: dict[type[_Step], Callable[[_Replay, int, Any], None]] = {
    StartStep: _Replay.start,
    StopStep: _Replay.leave,
    CrashStep: _Replay.leave,
    RestartStep: _Replay.leave,
    AddConnectorStep: _Replay.add_connector,
    RemoveConnectorStep: _Replay.change_connector,
    SetTasksStep: _Replay.change_connector,
    AdoptStep: _Replay.ownership,
    ReleaseStep: _Replay.ownership,
    **dict.fromkeys(MISBEHAVIOURS, _Replay.misbehave),
}
"""Step model -> the consistency check of :class:`_Replay` it goes through (a restart of the bridge
has none)."""


class Scenario(_Model):
    """One drill. ``steps`` are in time order; the drill ends at ``end_ms``."""

    name: Name
    seed: int = 0
    group: Name = "connect-cluster"
    timing: Timing = Timing()
    migration_policy: MigrationPolicy = "bidirectional"
    upstream: bool = False
    """The group starts coordinated by an upstream (Kafka) coordinator, relayed through the bridge
    until an ``adopt`` step (docs/adoption.md); ``release`` hands it back."""
    connectors: dict[Name, NonNegInt]
    steps: list[Step]
    end_ms: NonNegInt

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        """Replay the steps symbolically so impossible sequences fail before the drill runs."""
        replay = _Replay(set(self.connectors))
        replay.upstream = self.upstream
        prev_at = 0
        for i, step in enumerate(self.steps):
            if step.at_ms < prev_at:
                raise _CrossFieldError(
                    f"steps[{i}].at_ms",
                    f"{step.at_ms} is before the previous step's {prev_at} (steps must be in time order)",
                )
            prev_at = step.at_ms
            check = _REPLAY.get(type(step))
            if check is not None:
                check(replay, i, step)
        if self.steps and self.end_ms < prev_at:
            raise _CrossFieldError(
                "end_ms",
                f"{self.end_ms} is before the last step (steps[{len(self.steps) - 1}].at_ms = {prev_at})",
            )
        return self

    @property
    def workers(self) -> list[str]:
        """Every worker the scenario mentions, in order of first appearance."""
        seen: dict[str, None] = {}
        for step in self.steps:
            worker = getattr(step, "worker", None)
            if worker is not None:
                seen.setdefault(worker, None)
        return list(seen)


# --- loading -------------------------------------------------------------------------------------

_MODEL_AT_TOP: dict[str, type[BaseModel]] = {"timing": Timing}


def _format_loc(loc: tuple[Any, ...]) -> tuple[str, type[BaseModel]]:
    """Turn pydantic's location into ``steps[3].worker`` and find the innermost model on the way.

    Discriminated unions put the tag into the location (``('steps', 3, 'start', 'worker')``); that
    is pydantic's bookkeeping, not a path in the file, so it is dropped.
    """
    parts: list[str] = []
    model: type[BaseModel] = Scenario
    i = 0
    while i < len(loc):
        part = loc[i]
        if isinstance(part, int):
            parts.append(f"[{part}]")
        else:
            parts.append(f".{part}" if parts else str(part))
            if len(parts) == 1:
                model = _MODEL_AT_TOP.get(str(part), Scenario)
        if loc[:1] == ("steps",) and i == 1 and len(loc) > 2 and loc[2] in STEP_MODELS:
            model = STEP_MODELS[loc[2]]
            i += 1  # skip the tag
        i += 1
    return "".join(parts), model


def _describe(err: Mapping[str, Any]) -> str:
    """One ``path: problem`` phrase for one pydantic error."""
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    loc = tuple(err["loc"])
    if kind == "value_error" and not loc and isinstance(ctx.get("error"), _CrossFieldError):
        return str(ctx["error"])
    path, _ = _format_loc(loc)
    if kind == "extra_forbidden":
        parent, owner = _format_loc(loc[:-1])
        where = f"{parent}: " if parent else ""
        return f"{where}unknown field '{loc[-1]}' (allowed: {', '.join(owner.model_fields)})"
    if kind == "union_tag_invalid":
        expected = ", ".join(STEP_MODELS)
        return f"{path}.action: unknown action {ctx.get('tag')!r}; expected one of {expected}"
    if kind == "union_tag_not_found":
        return f"{path}.action: missing (every step needs an action: {', '.join(STEP_MODELS)})"
    if kind == "missing":
        return f"{path}: missing required field"
    if kind == "literal_error":
        expected = str(ctx.get("expected", "")).replace("'", "").replace(" or ", ", ")
        field = path.rsplit(".", 1)[-1]
        return f"{path}: unknown {field} {value!r}; expected one of {expected}"
    where = path or "(top level)"
    return f"{where}: {err['msg'][:1].lower()}{err['msg'][1:]} (got {json.dumps(value, default=str)[:60]})"


def _one_line(source: str, exc: ValidationError) -> str:
    """Every error, on one line: fixing a scenario one error per run is a slow way to write one."""
    errors = exc.errors()
    count = f"{len(errors)} errors: " if len(errors) > 1 else ""
    return f"{source}: {count}{'; '.join(_describe(e) for e in errors)}".replace("\n", " ")


def load_scenario(source: str | Path | Mapping[str, Any]) -> Scenario:
    """Load and validate a scenario from a JSON file path or an already-parsed mapping.

    Every failure (unreadable file, bad JSON, schema, impossible step sequence) raises
    :class:`ScenarioError` with a single line naming the file, the field path and the problem.
    """
    if isinstance(source, Mapping):
        label, data = "<scenario>", dict(source)
    else:
        label = str(source)
        try:
            data = json.loads(Path(source).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ScenarioError(f"{label}: cannot read: {exc.strerror or exc}") from None
        except json.JSONDecodeError as exc:
            where = f"line {exc.lineno} column {exc.colno}"
            raise ScenarioError(f"{label}: invalid JSON at {where}: {exc.msg}") from None
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(_one_line(label, exc)) from None


def dump_scenario(scenario: Scenario, path: str | Path) -> None:
    """Write ``scenario`` as JSON that :func:`load_scenario` reads back to an equal value."""
    Path(path).write_text(scenario.model_dump_json(indent=2, exclude_none=True) + "\n", encoding="utf-8")
