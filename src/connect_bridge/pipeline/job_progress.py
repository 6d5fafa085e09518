"""How many drills of a fleet are done, while Spark runs them, for the operator's progress bar.

The drills of a fleet run inside one Spark job (``mapInPandas`` over the seeds), and the driver
hears nothing from it until the job ends: minutes for a large fleet. Spark's status tracker knows
how many tasks of each stage have finished, and each task of the drill stage runs an equal share
of the seeds, so ``count × finished tasks / tasks`` is how many drills are done, give or take one
task's share. The jobs are found by a job group set for the duration of the block, and the drill
stage by its number of tasks (one per seed partition): the stage before it, which makes the seeds,
is a single task, and with adaptive query execution it runs as a job of its own, so "the widest
stage so far" would read 100% before the drills start.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["drills_done"]

POLL_S = 0.5
_KEYS = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")
"""The local properties ``setJobGroup`` sets: restored afterwards, so later jobs are not labelled."""


def _fraction(tracker: Any, group: str, tasks: int) -> float | None:
    """Finished share of the group's drill stage (the one of ``tasks`` tasks); None before it is
    known."""
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        for stage_id in job.stageIds if job is not None else ():
            stage = tracker.getStageInfo(stage_id)
            if stage is not None and stage.numTasks == tasks:
                return min(stage.numCompletedTasks, tasks) / tasks
    return None


@contextlib.contextmanager
def drills_done(spark: Any, count: int, tasks: int, report: Callable[[int], None]) -> Iterator[None]:
    """While the block runs Spark jobs (in this thread) over ``count`` drills in a stage of
    ``tasks`` tasks, ``report(done)`` every :data:`POLL_S` seconds when the number moved. The
    previous job group is restored."""
    sc = spark.sparkContext
    group = f"connect-bridge-fleet-{uuid.uuid4().hex[:12]}"
    previous = {key: sc.getLocalProperty(key) for key in _KEYS}
    sc.setJobGroup(group, f"{count} drills")
    stop = threading.Event()

    def watch() -> None:
        last = -1
        while not stop.wait(POLL_S):
            share = _fraction(sc.statusTracker(), group, tasks)
            done = -1 if share is None else int(count * share)
            if done > last:
                last = done
                report(done)

    watcher = threading.Thread(target=watch, name="fleet-progress", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join()
        for key, value in previous.items():
            sc.setLocalProperty(key, value)
