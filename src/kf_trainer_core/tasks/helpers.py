"""What orchestrator tasks need beyond the SDK's calls, written once for every adapter:

- :func:`await_steps` (and :func:`wait_for_step`, its synchronous face) waits for a
  *group* of steps — the initializers, or the whole training — so that a pipeline can
  show initialization and training as separate nodes (one step at a time is
  :mod:`kf_trainer_core.tasks.step_waits`);
- :func:`cancel_identity` stops whatever an orchestrator identity started, for the
  moment a task is killed before it learnt its job's name;
- :func:`cancel_if_unfinished` stops a job unless it already finished;
- :func:`follow_logs_in_background` copies a step's log to a sink while the task waits.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from kf_trainer_core.base.quoting import shown
from kf_trainer_core.cluster.status import TrainJob
from kf_trainer_core.fields import names
from kf_trainer_core.fields._model import fix
from kf_trainer_core.tasks.sync_runner import InterruptibleRunner

if TYPE_CHECKING:
    from kf_trainer_core.client import AsyncTrainerClient, CancelAction, TrainerClient

#: Step names :func:`wait_for_step` accepts, and the replicated jobs each stands for.
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


def wait_for_step(
    client: TrainerClient,
    name: str,
    step: str = "trainer",
    *,
    timeout: float | None = None,
    startup_timeout: float | None = None,
    callbacks: Iterable[Callable[[TrainJob], None]] | None = None,
    admission_timeout: float | None = None,
) -> tuple[TrainJob, Any]:
    """:func:`await_steps` from synchronous code: run on an event loop of its own with an
    async client of ``client``'s configuration (the calling thread stays interruptible,
    :class:`~kf_trainer_core.tasks.sync_runner.InterruptibleRunner`)."""

    async def waiting() -> tuple[TrainJob, Any]:
        from kf_trainer_core.client import AsyncTrainerClient

        config, namespace, retry = client.config, client.namespace, client.retry
        async with AsyncTrainerClient(config, namespace=namespace, retry=retry) as aclient:
            return await await_steps(
                aclient,
                name,
                step,
                timeout=timeout,
                startup_timeout=startup_timeout,
                callbacks=callbacks,
                admission_timeout=admission_timeout,
            )

    return InterruptibleRunner("kf-trainer-steps").run(waiting())


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

    ``step="trainer"`` is :meth:`AsyncTrainerClient.wait` for ``Complete`` (with
    ``startup_timeout``). An initializer step is done when its pod succeeded
    (:func:`kf_trainer_core.tasks.step_waits.await_step`); ``"initializer"`` waits for each one
    the job's runtime has and returns at once when it has none; an initializer the
    runtime lacks is a ``ValueError``. A failed job raises ``TrainJobFailedError`` or
    ``StepFailedError`` with the failing step. ``admission_timeout``: fail when Kueue has
    not admitted the job by then (an initializer step first waits for admission).
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
    if admission_timeout is not None:
        # A queued job's initializers wait for admission too: the client's wait knows
        # Kueue (what the queue waits for); the step wait below only knows pods.
        await client.wait(
            name,
            ("Running", "Complete"),
            timeout=timeout,
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


def cancel_identity(
    client: TrainerClient,
    identity: str | Sequence[str | int | None],
    action: CancelAction = "delete",
) -> list[str]:
    """Cancel the unfinished jobs of an identity (``delete`` / ``suspend``; ``keep``
    does nothing) and return their names. Finished jobs stay for inspection."""
    return client.stop_unfinished(identity=identity, action=action)


def cancel_if_unfinished(client: TrainerClient, name: str, action: CancelAction = "delete") -> bool:
    """Cancel job ``name`` unless it already finished (a complete job keeps its result
    for a retried task to collect); ``False`` when nothing was done or it is gone."""
    return bool(client.stop_unfinished(name, action=action))


@contextmanager
def follow_logs_in_background(
    client: TrainerClient,
    name: str,
    step: str,
    sink: Callable[[str], None],
    *,
    tail: int = 1000,
    drain_seconds: float = 5.0,
) -> Iterator[None]:
    """Copy the log of ``step`` (a step name such as ``node-0`` or
    ``dataset-initializer``) to ``sink`` while the body runs, then give the stream
    ``drain_seconds`` to deliver its last lines. Log trouble never fails the caller.

    The follower gets its own client: a driver runs one program at a time, and the
    body keeps the caller's busy."""
    from kf_trainer_core.client import TrainerClient as _Client

    # Here, not in the thread: there the error would become one line of the log.
    names.require_job_name(name)
    stop = threading.Event()
    follower_client = _Client(client.config, namespace=client.namespace, retry=client.retry)

    def follow() -> None:
        try:
            for line in follower_client.get_job_logs(name, step, follow=True, tail=tail):
                if stop.is_set():
                    return
                sink(line)
        except Exception as exc:  # a courtesy: the wait decides the outcome
            if not stop.is_set():
                sink(f"[kf-trainer] the log stream of {step} ended: {exc}")

    thread = threading.Thread(target=follow, name=f"kf-logs-{name}-{step}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        thread.join(drain_seconds)
        stop.set()
        follower_client.close()
