""":func:`await_steps` waits for a *group* of steps — the initializers, or the whole
training — so that a pipeline can show initialization and training as separate nodes
(one step at a time is :mod:`kf_trainer_core.tasks.step_waits`); :func:`parse_step`
reads a step's name."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from kf_trainer_core.base.quoting import shown
from kf_trainer_core.cluster.status import TrainJob
from kf_trainer_core.fields import names
from kf_trainer_core.fields._model import fix

if TYPE_CHECKING:
    from kf_trainer_core.client import AsyncTrainerClient

#: Step names :func:`await_steps` accepts, and the replicated jobs each stands for.
#: An empty tuple means the whole job (it is Complete when training is).
STEPS: dict[str, tuple[str, ...]] = {
    "initializer": (names.DATASET_INITIALIZER, names.MODEL_INITIALIZER),
    names.DATASET_INITIALIZER: (names.DATASET_INITIALIZER,),
    names.MODEL_INITIALIZER: (names.MODEL_INITIALIZER,),
    "trainer": (),
}
#: Other spellings of the training step.
_TRAINER_ALIASES = frozenset({"trainer", "training", "train", "node", "node-0", "complete"})

#: The log each step writes to (the SDK's step names).
LOG_STEP = {
    "initializer": names.DATASET_INITIALIZER,
    names.DATASET_INITIALIZER: names.DATASET_INITIALIZER,
    names.MODEL_INITIALIZER: names.MODEL_INITIALIZER,
    "trainer": f"{names.NODE}-0",
}


def parse_step(step: str) -> str:
    """The canonical name of ``step`` (``initializer``, ``dataset-initializer``,
    ``model-initializer`` or ``trainer``); ``ValueError`` naming the choices."""
    key = step.strip().lower()
    if key in _TRAINER_ALIASES:
        return "trainer"
    if key in ("initializers", "init"):
        return "initializer"
    if key in STEPS:
        return key
    raise ValueError(
        fix(
            f"step {shown(step)} is not a step of a TrainJob.",
            "use 'initializer' (all initializers), 'dataset-initializer', "
            "'model-initializer' or 'trainer' (the whole job).",
        )
    )


async def await_steps(
    client: AsyncTrainerClient,
    name: str,
    step: str = "trainer",
    *,
    timeout: float | None = None,
    startup_timeout: float | None = None,
    callbacks: Iterable[Callable[[TrainJob], None]] | None = None,
    admission_timeout: float | None = None,
) -> tuple[TrainJob, Any]:
    """Wait until ``step`` of job ``name`` has finished; return the job (with its
    steps) and, once the whole job is complete, the function's return value.

    ``step="trainer"`` is :meth:`AsyncTrainerClient.wait` for ``Complete``. An
    initializer step is done when its pod succeeded
    (:func:`kf_trainer_core.tasks.step_waits.await_step`); ``"initializer"`` waits for
    each one the job's runtime has and returns at once when it has none; an initializer
    the runtime lacks is a ``ValueError``. A failed job raises ``TrainJobFailedError`` or
    ``StepFailedError`` with the failing step. ``admission_timeout``: fail when Kueue has
    not admitted the job by then; ``startup_timeout``: fail when it has not started
    running by then (an initializer step first waits for the job to start, within
    both).
    """
    from kf_trainer_core.tasks.step_waits import StepGoal, await_step

    names.require_job_name(name)
    canonical = parse_step(step)
    wanted = STEPS[canonical]
    if not wanted:
        return await client.wait(
            name,
            timeout=timeout,
            startup_timeout=startup_timeout,
            admission_timeout=admission_timeout,
            callbacks=callbacks,
        )
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    if admission_timeout is not None or startup_timeout is not None:
        # An initializer step is bound by both limits too, as the whole job is: the
        # client's wait knows Kueue (what the queue waits for) and what holds a job
        # that has not started up; the step wait below only knows pods. A job that
        # has ended is the step wait's to judge (its initializers may have succeeded).
        await client.wait(
            name,
            ("Running", "Complete", "Failed"),
            timeout=timeout,
            startup_timeout=startup_timeout,
            admission_timeout=admission_timeout,
            callbacks=callbacks,
        )
    job = await client.get_job(name)
    runtime = await client.get_runtime(job.runtime, job.runtime_kind)
    present = [r for r in wanted if r in runtime.replicated_jobs]
    if not present:
        if canonical == "initializer":
            return job, None
        raise ValueError(
            fix(
                f"TrainJob {job.namespace}/{name} has no {canonical} step: its runtime "
                f"{shown(runtime.name)} runs {', '.join(runtime.replicated_jobs)}.",
                "wait for one of those steps, or for 'trainer'.",
            )
        )
    for step_name in present:
        left = None if deadline is None else max(deadline - loop.time(), 0.0)
        job, _ = await await_step(
            client,
            name,
            StepGoal.of(step_name, "Succeeded"),
            timeout=left,
            callbacks=list(callbacks or []),
        )
    return job, None
