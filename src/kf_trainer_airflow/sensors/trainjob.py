"""``TrainJobSensor``: wait for an existing TrainJob, or one step of it.

With ``step`` the sensor waits for that step's pod phase — ``dataset-initializer``
Succeeded, ``node-0`` Running... — so that the initializers, training and evaluation of
one job can be separate nodes of a DAG (submit with
``TrainJobOperator(wait_for_completion=False)``, then sense each step). Without
``step`` it waits for the job's state (``Complete`` by default).

It pokes (one read of the job and its pods per poke), reschedules, or defers to the
triggerer, where the job's shared watch wakes it. A failed job or step fails the
sensor with the reason. The sensor never cancels the job: it does not own it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any, NoReturn

from kf_trainer_airflow import _args
from kf_trainer_airflow._compat import BaseSensorOperator, PokeReturnValue, conf
from kf_trainer_airflow.operators.trainjob import TrainJobFailedException
from kf_trainer_airflow.provider_info import DEFAULT_CONN_ID
from kf_trainer_core.tasks import shown

if TYPE_CHECKING:
    from airflow.sdk import Context

    from kf_trainer_airflow.hooks.trainer import KubeflowTrainerHook
    from kf_trainer_core.client import TrainerClient
    from kf_trainer_core.tasks import TrainJob

# A job that got further than the wanted state has passed through it.
_JOB_PROGRESS = {"Created": 0, "Running": 1, "Complete": 2}


def _wanted(value: str | Sequence[str] | None, default: str) -> list[str]:
    if value is None:
        return [default]
    return [value] if isinstance(value, str) else list(value)


class TrainJobSensor(BaseSensorOperator):
    """Wait until TrainJob ``job_name`` — or its step ``step`` — reaches
    ``target_status``.

    :param job_name: the TrainJob (templated; e.g. the ``job_name`` XCom of a
        ``TrainJobOperator``: ``"{{ ti.xcom_pull('train', key='job_name') }}"``).
    :param step: a step to wait for: ``dataset-initializer``, ``model-initializer``,
        ``node-<i>`` (``node-0`` is the first node, or the MPI launcher).
    :param target_status: wanted states. Job: ``Created``, ``Suspended``, ``Running``,
        ``Complete`` (default), ``Failed``. Step: ``Pending``, ``Running``,
        ``Succeeded`` (default), ``Failed``.
    :param namespace: the job's namespace (default: the connection's).
    :param kubeflow_trainer_conn_id: connection of the backend.
    :param deferrable: wait in the triggerer.
    :param recheck_interval: deferred step waits also re-read the job's pods this often.
    :param resume_grace: deferred waits: an ending seen sooner than this many seconds
        after the sensor deferred is reported at that mark (Airflow 3.3's stale
        defer-exit race, apache/airflow#72716); ``0`` reports at once.

    The sensor's value (XCom) is the step (name, status, pod, exit code...) for step
    waits, the JobOutputs dict for a ``Complete`` job, else the job's name, namespace
    and state.
    """

    template_fields: Sequence[str] = ("job_name", "namespace", "step")
    ui_color = "#4279f4"
    ui_fgcolor = "#ffffff"

    def __init__(
        self,
        *,
        job_name: str,
        step: str | None = None,
        target_status: str | Sequence[str] | None = None,
        namespace: str | None = None,
        kubeflow_trainer_conn_id: str | None = DEFAULT_CONN_ID,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        recheck_interval: float = 30.0,
        resume_grace: float | timedelta = _args.DEFAULT_RESUME_GRACE,
        **kwargs: Any,
    ) -> None:
        _args.unknown_arguments(type(self), kwargs, type(self).__name__)
        super().__init__(**kwargs)
        _args.job_name(job_name)
        self.job_name = job_name
        self.step = step
        self.target_status = _wanted(target_status, "Succeeded" if step else "Complete")
        self.namespace = namespace
        self.kubeflow_trainer_conn_id = kubeflow_trainer_conn_id
        self.deferrable = deferrable
        self.recheck_interval = _args.seconds(recheck_interval, "recheck_interval") or 30.0
        self.resume_grace = _args.seconds(resume_grace, "resume_grace", zero="allowed") or 0.0
        if step is None:
            # The status models load here, when a sensor is made, not when a DAG file
            # imports this module.
            from kf_trainer_core.tasks import JobState

            known = [s.value for s in JobState]
            bad = [s for s in self.target_status if s not in known]
            if bad:
                raise ValueError(
                    f"target_status {shown(bad)} is not a job state. Fix: use some of "
                    f"{', '.join(known)} (or set `step` to wait for a step's pod phase)."
                )
        elif "{{" not in step:
            self._goal()  # a misspelt step fails when the DAG is parsed

    def _goal(self) -> Any:
        from kf_trainer_core.tasks.step_waits import StepGoal

        assert self.step is not None
        return StepGoal.of(self.step, self.target_status)

    @cached_property
    def hook(self) -> KubeflowTrainerHook:
        """The hook for this sensor's connection and namespace."""
        # Loaded here, not by the module: the hook imports the core's configuration
        # models, and a DAG file that only builds the task need not pay for them.
        from kf_trainer_airflow.hooks.trainer import KubeflowTrainerHook

        return KubeflowTrainerHook(self.kubeflow_trainer_conn_id, namespace=self.namespace)

    # -- poking -----------------------------------------------------------------------
    def poke(self, context: Context) -> bool | PokeReturnValue:
        from kf_trainer_core.errors import TrainJobNotFoundError

        with self.hook.get_client() as client:
            try:
                job = client.get_job(self.job_name)
            except TrainJobNotFoundError:
                raise TrainJobFailedException(
                    f"TrainJob {client.namespace}/{self.job_name} does not exist. Fix: check "
                    "the name and namespace (the job_name XCom of the task that submitted it).",
                    job_name=self.job_name,
                    namespace=client.namespace,
                ) from None
            if self.step:
                return self._poke_step(client, job)
            return self._poke_job(client, job)

    def _never_admitted(self, job: TrainJob) -> None:
        """A job Kueue can never admit will reach nothing: fail now, as a wait does."""
        if job.queue is None or not job.queue.never_admissible:
            return
        from kf_trainer_airflow.failures import failed_exception
        from kf_trainer_core.tasks import never_admitted

        failure = never_admitted(job.queue)
        raise failed_exception(
            f"TrainJob {job.namespace}/{job.name} can never be admitted by Kueue: "
            f"{failure.describe()}",
            job_name=job.name,
            namespace=job.namespace,
            failure=failure.model_dump(mode="json"),
        )

    def _poke_step(self, client: TrainerClient, job: TrainJob) -> bool | PokeReturnValue:
        goal = self._goal()
        verdict, step = goal.judge(job)
        if verdict == "reached":
            self.log.info("Step %s of %s/%s is %s", goal.step, job.namespace, job.name, step.status)
            return PokeReturnValue(is_done=True, xcom_value=step.model_dump(mode="json"))
        if verdict == "waiting":
            self._never_admitted(job)
            state = step.status if step is not None else "not started"
            self.log.info(
                "Step %s of %s/%s is %s (job %s)",
                goal.step,
                job.namespace,
                job.name,
                state,
                job.status.value,
            )
            return False
        raise self._failure(client, job, goal.explain(job, verdict, step))

    def _poke_job(self, client: TrainerClient, job: TrainJob) -> bool | PokeReturnValue:
        from kf_trainer_core.tasks import JobState

        state = job.status.value
        passed = job.status is JobState.COMPLETE and any(
            _JOB_PROGRESS.get(t, 99) < _JOB_PROGRESS["Complete"] for t in self.target_status
        )
        if state in self.target_status or passed:
            self.log.info("TrainJob %s/%s is %s", job.namespace, job.name, state)
            if job.status is JobState.COMPLETE:
                value: Any = client.get_job_outputs(job.name).model_dump(mode="json")
            else:
                value = {"job_name": job.name, "namespace": job.namespace, "status": state}
            return PokeReturnValue(is_done=True, xcom_value=value)
        if job.status.terminal:
            wanted = " or ".join(self.target_status)
            where = f"TrainJob {job.namespace}/{job.name}"
            raise self._failure(client, job, f"{where} is {state}, not {wanted}.")
        self._never_admitted(job)
        self.log.info("TrainJob %s/%s is %s", job.namespace, job.name, state)
        return False

    def _failure(
        self, client: TrainerClient, job: TrainJob, message: str
    ) -> TrainJobFailedException:
        from kf_trainer_core.tasks import JobState

        failure = None
        if job.status is JobState.FAILED:
            try:
                found = client.explain_failure(job.name)
                failure = found.model_dump(mode="json")
                message = f"{message}\n{found.describe()}"
            except Exception as exc:  # the verdict stands without the details
                self.log.warning("Could not explain the failure of %s: %s", job.name, exc)
        from kf_trainer_airflow.failures import failed_exception

        # A type per failure class, as the operator raises (retry policies match it).
        return failed_exception(
            message, job_name=job.name, namespace=job.namespace, failure=failure
        )

    # -- deferring --------------------------------------------------------------------
    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        first = self.poke(context)
        if isinstance(first, PokeReturnValue) and first.is_done:
            return first.xcom_value
        return self._defer()

    def _defer(self) -> NoReturn:
        from kf_trainer_airflow.triggers.trainjob import TrainJobTrigger

        namespace = self.namespace or self.hook.get_backend_config().resolve_namespace()
        self.defer(
            trigger=TrainJobTrigger(
                job_name=self.job_name,
                namespace=namespace,
                kubeflow_trainer_conn_id=self.kubeflow_trainer_conn_id,
                status=self.target_status if not self.step else ("Complete",),
                step=self.step,
                step_status=self.target_status,
                timeout=float(self.timeout) if self.timeout else None,
                on_kill_action="keep",
                recheck_interval=self.recheck_interval,
                deferred_at=time.time(),
                resume_grace=self.resume_grace,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=float(self.timeout)) if self.timeout else None,
        )

    def execute_complete(self, context: Context, event: Mapping[str, Any]) -> Any:
        """Resume after the trigger fired."""
        if event.get("status") == "success":
            if self.step:
                return event.get("step")
            return event.get("outputs") or {
                "job_name": event.get("job_name"),
                "namespace": event.get("namespace"),
                "status": event.get("job_status"),
            }
        from kf_trainer_airflow.failures import failed_exception

        raise failed_exception(
            str(event.get("message") or f"TrainJob {self.job_name}: {event.get('status')}"),
            job_name=str(event.get("job_name")),
            namespace=str(event.get("namespace")),
            failure=event.get("failure"),
            failure_class=event.get("failure_class"),
        )
