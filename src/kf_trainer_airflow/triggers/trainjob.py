"""``TrainJobTrigger``: wait for a TrainJob (or one of its steps) in the triggerer.

Every trigger of a triggerer process that uses the same connection shares one watch
per namespace (the core's informer), so a thousand deferred training tasks cost one
open watch, not a thousand polls. While waiting, the trigger writes the job's state
changes and its ``trainerStatus`` progress (percentage, time left, metrics) into the
task's log.

Cancelling: when a user marks the deferred task failed or success, or clears it,
Airflow 3.3+ calls :meth:`TrainJobTrigger.on_kill` and the job is deleted (or
suspended, or kept: ``on_kill_action``). A triggerer also cancels, the same way, a
trigger that is no longer assigned to it — one that moved to another triggerer because
this one missed its heartbeats. The task instance is then still *deferred*, so the
trigger asks the API server for the task's state first and leaves the job running for
the trigger's new home. Before 3.3 (no ``on_kill`` for triggers) the same decision is
made in ``cleanup()``, which runs on every exit, restarts included.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

# Airflow's triggerer imports this module on its event loop, shared by every trigger:
# only light modules here. What a wait needs (the hook, the client, the Kubernetes
# library) is imported in one worker thread when the first trigger runs (_RUNTIME).
from kf_trainer_airflow.provider_info import DEFAULT_CONN_ID
from kf_trainer_core.tasks import seconds
from kf_trainer_core.tasks.interruptions import check_action

if TYPE_CHECKING:
    from kf_trainer_airflow.hooks.trainer import KubeflowTrainerHook
    from kf_trainer_core.tasks import TaskJob

#: The triggerer calls ``on_kill`` for user actions (Airflow 3.3+).
HAS_TRIGGER_ON_KILL = "on_kill" in BaseTrigger.__dict__

_DEFERRED = "deferred"

#: Whether this process has made its first task-state request (see ``_warm_up``).
_API_WARMING = False
#: The module that imports everything a wait needs, imported off the event loop.
_RUNTIME = "kf_trainer_airflow.triggers._runtime"
# Background tasks are referenced until done (the event loop keeps weak references).
_BACKGROUND: set[asyncio.Future[None]] = set()


class TrainJobTrigger(BaseTrigger):
    """Fire once job ``job_name`` reaches one of ``status`` — or, with ``step``, once
    that step reaches one of ``step_status`` — or fails, times out or is deleted.

    The event's payload is JSON: ``status`` is ``success``, ``failed``, ``timeout``,
    ``deleted`` or ``error``; ``outputs`` (job waits) or ``step`` (step waits) describe
    the result; ``failure`` (reason, message, step, pod, container reason, exit code,
    events, log tail) and ``message`` explain the others; ``log_followed`` (with
    ``log_step``) says whether the step's log was shown while waiting. It never holds
    credentials: the trigger carries a connection id and reads the connection where it
    runs.

    :param job_name: the TrainJob.
    :param namespace: its namespace.
    :param kubeflow_trainer_conn_id: connection of the backend.
    :param status: job states to wait for (``Created``, ``Suspended``, ``Running``,
        ``Complete``, ``Failed``).
    :param step: a step to wait for instead (``dataset-initializer``,
        ``model-initializer``, ``node-<i>``).
    :param step_status: the step's wanted states (``Pending``, ``Running``,
        ``Succeeded``, ``Failed``).
    :param startup_timeout: fail when the job has not started after this many seconds.
    :param admission_timeout: fail when Kueue has not admitted the job after this many
        seconds.
    :param timeout: give up after this many seconds (``None``: wait as long as it runs).
    :param on_kill_action: what a user's kill does to the job: ``delete``, ``suspend``
        or ``keep``.
    :param recheck_interval: step waits also re-read the job's pods this often.
    :param report_progress: log state changes and trainer progress.
    :param deferred_at: when the task deferred (seconds since the epoch, the worker's
        clock), for ``resume_grace``.
    :param resume_grace: an event is not fired sooner than this many seconds after
        ``deferred_at``: Airflow 3.3 fails a task that resumes before the scheduler has
        processed its deferring worker's exit (apache/airflow#72716). ``0`` fires at once.
    :param log_step: job waits: follow this step's log while waiting, each line into the
        task's log as it is written (Airflow 3 routes a trigger's log to its task's),
        cleaned and capped as every log line the suite shows. ``None``: no log. The
        event's ``log_followed`` says whether the log was shown, so that the task does
        not print it again when it resumes.
    :param log_tail: at most this many lines written before the follow began are shown
        first. A trigger made again after a triggerer restart (or moved to another
        triggerer) cannot know which lines its predecessor showed: it starts again with
        these lines, so at most ``log_tail`` lines may show twice (see docs/airflow.md).
    """

    def __init__(
        self,
        *,
        job_name: str,
        namespace: str,
        kubeflow_trainer_conn_id: str | None = DEFAULT_CONN_ID,
        status: Sequence[str] = ("Complete",),
        step: str | None = None,
        step_status: Sequence[str] = ("Succeeded",),
        startup_timeout: float | None = None,
        timeout: float | None = None,
        on_kill_action: str = "delete",
        admission_timeout: float | None = None,
        recheck_interval: float = 30.0,
        report_progress: bool = True,
        deferred_at: float | None = None,
        resume_grace: float = 0.0,
        log_step: str | None = None,
        log_tail: int = 1000,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        check_action(on_kill_action, "on_kill_action")
        self.job_name = job_name
        self.namespace = namespace
        self.kubeflow_trainer_conn_id = kubeflow_trainer_conn_id
        self.status = list(status)
        self.step = step
        self.step_status = list(step_status)
        self.startup_timeout = seconds(startup_timeout, "startup_timeout")
        self.admission_timeout = seconds(admission_timeout, "admission_timeout")
        self.timeout = seconds(timeout, "timeout")
        self.on_kill_action = on_kill_action
        self.recheck_interval = seconds(recheck_interval, "recheck_interval") or 30.0
        self.report_progress = report_progress
        self.deferred_at = None if deferred_at is None else float(deferred_at)
        self.resume_grace = seconds(resume_grace, "resume_grace", zero="allowed") or 0.0
        self.log_step = log_step
        self.log_tail = int(log_tail)
        self._fired = False
        self._kill: asyncio.Future[None] | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        # Each argument is kept under its own name (and rendered JSON-ready) by __init__.
        names = list(inspect.signature(TrainJobTrigger.__init__).parameters)[1:]
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {name: getattr(self, name) for name in names},
        )

    @cached_property
    def hook(self) -> KubeflowTrainerHook:
        """The hook (its connection is read once, then reused by ``on_kill``)."""
        from kf_trainer_airflow.hooks.trainer import KubeflowTrainerHook

        return KubeflowTrainerHook(self.kubeflow_trainer_conn_id, namespace=self.namespace)

    @property
    def _where(self) -> str:
        return f"TrainJob {self.namespace}/{self.job_name}"

    # -- running --------------------------------------------------------------------
    async def run(self) -> AsyncIterator[TriggerEvent]:
        self._warm_up()
        try:
            from kf_trainer_core.tasks import imported

            await imported(_RUNTIME)
        except Exception as exc:
            payload: dict[str, Any] = {
                "job_name": self.job_name,
                "namespace": self.namespace,
                "status": "error",
                "message": f"{type(exc).__name__}: {exc}",
            }
        else:
            payload = await self._wait()
        await self._hold()
        self._fired = True
        yield TriggerEvent(payload)  # type: ignore[no-untyped-call]

    def hold_for(self, now: float | None = None) -> float:
        """Seconds an event must still wait so that it fires no sooner than
        ``resume_grace`` after the deferral (never more than ``resume_grace``, whatever
        the clocks of the worker and the triggerer say)."""
        if not self.resume_grace or self.deferred_at is None:
            return 0.0
        now = time.time() if now is None else now
        return max(0.0, min(self.resume_grace, self.deferred_at + self.resume_grace - now))

    async def _hold(self) -> None:
        wait = self.hold_for()
        if wait <= 0:
            return
        # The job ended within seconds of the deferral: resuming the task now could
        # overtake the scheduler's processing of the deferring worker's exit, and
        # Airflow 3.3 would fail the task for it (apache/airflow#72716).
        self.log.info(
            "%s ended %.1fs after the task deferred: reporting it in %.1fs (resume_grace)",
            self._where,
            self.resume_grace - wait,
            wait,
        )
        await asyncio.sleep(wait)

    def _warm_up(self) -> None:
        """Make this process's first task-state request now, in the background.

        A kill is only acted on after asking the API server for the task's state (a
        trigger that merely moves to another triggerer must keep its job). The
        triggerer answers such requests through an in-process copy of Airflow's
        execution API, built on its first use: measured here, 7 to 30 s during which
        the triggerer answers nothing — which was most of the time between a kill and
        the job's deletion. Made when the first trigger starts, a kill later costs one
        quick request."""
        global _API_WARMING
        if _API_WARMING or self.task_instance is None or not HAS_TRIGGER_ON_KILL:
            return
        _API_WARMING = True

        async def ask() -> None:
            try:
                await self.task_state()
            except Exception:  # a courtesy: the kill asks again and handles errors
                self.log.debug("Warming up the task-state request failed", exc_info=True)

        task = asyncio.ensure_future(ask())
        _BACKGROUND.add(task)
        task.add_done_callback(_BACKGROUND.discard)

    async def _wait(self) -> dict[str, Any]:
        # Imported already, off the event loop (run() imports _RUNTIME).
        from kf_trainer_core.tasks.jobs import ProgressLines
        from kf_trainer_core.tasks.step_waits import StepGoal, await_step

        base: dict[str, Any] = {"job_name": self.job_name, "namespace": self.namespace}
        try:
            client = await self.hook.aget_client()
        except Exception as exc:
            return {**base, "status": "error", "message": f"{type(exc).__name__}: {exc}"}
        # A job's words hold "%": each line is an argument, never the format.
        reporter = (
            ProgressLines(lambda line: self.log.info("%s", line))
            if self.report_progress
            else (lambda _job: None)
        )
        try:
            async with client:
                if self.step:
                    goal = StepGoal.of(self.step, self.step_status)
                    job, step = await await_step(
                        client,
                        self.job_name,
                        goal,
                        timeout=self.timeout,
                        recheck_interval=self.recheck_interval,
                        callbacks=[reporter],
                    )
                    reached = {"step": step.model_dump(mode="json")}
                    status = job.status.value
                else:
                    task = self._task()
                    shown_step = self.log_step
                    if shown_step:
                        self.log.info(
                            "Following the log of %s, step %s (up to %d earlier lines first)",
                            self._where,
                            shown_step,
                            self.log_tail,
                        )
                    try:
                        # The outputs carry ``result_missing`` when the job succeeded but
                        # its result cannot be read: the operator decides if that matters.
                        out = await task.wait(
                            client,
                            self.status,
                            timeout=self.timeout,
                            startup_timeout=self.startup_timeout,
                            admission_timeout=self.admission_timeout,
                            # Each line into the trigger's log, as the worker's wait writes it.
                            on_log=(lambda line: self.log.info("[%s] %s", shown_step, line))
                            if shown_step
                            else None,
                            log_step=shown_step or "node-0",
                            log_tail=self.log_tail,
                            callbacks=[reporter],
                        )
                    finally:
                        if shown_step:
                            base["log_followed"] = task.log_followed
                    reached = {"outputs": out.model_dump(mode="json")}
                    status = out.status.value
                return {**base, "status": "success", "job_status": status, **reached}
        except Exception as err:
            told = ending(err) or {"status": "error", "message": f"{type(err).__name__}: {err}"}
            return {**base, **told}

    # -- cancelling -----------------------------------------------------------------
    async def task_state(self) -> str | None:
        """The task instance's state as the API server has it (``None`` when unknown)."""
        ti = self.task_instance
        if ti is None:
            return None
        from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

        map_index = getattr(ti, "map_index", -1)
        map_index = -1 if map_index is None else map_index
        states = await asyncio.to_thread(
            RuntimeTaskInstance.get_task_states,
            dag_id=ti.dag_id,
            task_ids=[ti.task_id],
            run_ids=[ti.run_id],
            map_index=map_index,
        )
        of_run = states.get(ti.run_id) or {}
        key = ti.task_id if map_index < 0 else f"{ti.task_id}_{map_index}"
        state = of_run.get(key, of_run.get(ti.task_id))
        return None if state is None else str(getattr(state, "value", state))

    def _task(self) -> TaskJob:
        """The task's hold on its job (known by name): the core's wait and kill."""
        from kf_trainer_core.tasks import TaskJob, Terms

        job = TaskJob(
            on_kill=self.on_kill_action,
            logger=self.log,
            terms=Terms(on_kill="on_kill_action", rerun="the task's next try"),
        )
        job.knows(self.job_name)
        return job

    async def _cancel(self, why: str) -> None:
        try:
            from kf_trainer_core.tasks import TaskKilled, imported

            await imported(_RUNTIME)
            client = await self.hook.aget_client()
            async with client:
                await self._task().stop(client, TaskKilled(why))
        except Exception:
            self.log.exception("Could not %s %s", self.on_kill_action, self._where)

    async def _kill_unless_moving(self) -> None:
        try:
            state = await self.task_state()
        except Exception:
            # The triggerer says a user acted; without a second opinion, believe it.
            self.log.warning("Could not read the task's state; acting on the kill", exc_info=True)
            state = None
        if state == _DEFERRED:
            self.log.info(
                "%s kept: the task is still deferred (the trigger is moving to another triggerer)",
                self._where,
            )
            return
        await self._cancel(f"task killed, now {state or 'unknown'}")

    async def _finish_kill(self) -> None:
        # The triggerer cancels a trigger again on each of its loops until it is gone,
        # which would interrupt a kill half-way (after the state check, before the
        # delete): the work runs as its own task, shielded from those cancellations.
        if self._kill is None:
            self._kill = asyncio.ensure_future(self._kill_unless_moving())
        await asyncio.shield(self._kill)

    async def on_kill(self) -> None:
        """The user stopped the deferred task: delete (or suspend) the job — unless the
        trigger is only moving to another triggerer."""
        if self._fired or self.on_kill_action == "keep":
            return
        self.log.info("%s: the task was stopped; checking it is not just moving", self._where)
        await self._finish_kill()

    async def cleanup(self) -> None:
        """Let a kill in progress finish; before Airflow 3.3 (no ``on_kill`` for
        triggers), cancel the job here when the trigger was removed because the task was
        stopped, not because it moved."""
        if self._kill is not None:
            await self._finish_kill()
            return
        if HAS_TRIGGER_ON_KILL or self._fired or self.on_kill_action == "keep":
            return
        try:
            state = await self.task_state()
        except Exception:
            # cleanup() also runs on every triggerer restart: when unsure, keep the job.
            self.log.warning("Could not read the task's state; keeping the job", exc_info=True)
            return
        if state is None or state == _DEFERRED:
            return
        await self._cancel(f"task stopped, now {state}")


def ending(err: BaseException) -> dict[str, Any] | None:
    """How a wait ended badly, in the words of the trigger's event (JSON): ``failed`` or
    ``timeout`` with the failure and its class, or ``deleted``; ``None`` for an error
    that is no such ending. The worker's wait ends through it too, so that both paths
    fail the task alike."""
    from kf_trainer_core.errors import (
        SpecConflictError,
        StepFailedError,
        TrainJobDeletedError,
        TrainJobFailedError,
        TrainJobNotFoundError,
        TrainJobTimeoutError,
        failure_class_of,
    )

    if isinstance(err, (TrainJobFailedError, StepFailedError, TrainJobTimeoutError)):
        timed_out = isinstance(err, TrainJobTimeoutError)
        message = str(err)
        if not timed_out and not message.startswith("TrainJob "):
            # The core says "<ns>/<name> failed: ...".
            message = f"TrainJob {message}"
        klass = failure_class_of(err)
        return {
            "status": "timeout" if timed_out else "failed",
            "message": message,
            "failure": err.failure.model_dump(mode="json") if err.failure else None,
            "failure_class": klass.value if klass is not None else None,
        }
    if isinstance(err, (TrainJobDeletedError, TrainJobNotFoundError, SpecConflictError)):
        # A job deleted under the wait (a kill, a user) may be seen as deleted or, when
        # it is already gone when next read, as not found: the same ending.
        return {"status": "deleted", "message": str(err)}
    return None
