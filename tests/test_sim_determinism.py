"""A simulated drill is a function of its scenario: run again (in the same process, after other
drills, as a fleet's executors do) it logs the same events. ``drill fleet`` promises that any drill
can be regenerated from the fleet seed and replayed with ``drill run``; the simulator once compared
``id()`` of group objects it had let go, so whether an address was reused decided whether a state
change was logged."""

from __future__ import annotations

import gc

from connect_bridge.drills.generate import random_scenario
from connect_bridge.drills.sim import run_scenario
from connect_bridge.pipeline.fleet import scenario_seed


def test_adversarial_drills_log_the_same_events_every_time() -> None:
    seeds = [scenario_seed(5, i) for i in range(40)]
    first = {seed: run_scenario(random_scenario(seed, adversarial=True)).events for seed in seeds}
    for seed in reversed(seeds):  # another order: other objects, other addresses
        gc.collect()
        again = run_scenario(random_scenario(seed, adversarial=True)).events
        assert again == first[seed], seed


def test_latencies_are_the_draws_of_randint() -> None:
    """The simulator draws a latency per message without ``Random.randint``'s call layers; the
    draws, and so every drill of every fleet seed, stay those ``randint`` gives."""
    import random

    from connect_bridge.drills.sim import SimulatedDrill

    scenario = random_scenario(scenario_seed(5, 0), adversarial=True)
    drill = SimulatedDrill(scenario)
    twin = random.Random(scenario.seed)
    lo, hi = drill.latency_ms
    assert [drill.latency() for _ in range(10_000)] == [twin.randint(lo, hi) for _ in range(10_000)]
