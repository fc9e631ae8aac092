"""``TrainJobOperator``: one Kubeflow Trainer TrainJob as one Airflow task.

What the task does with its job:

- **Submits it once per task instance.** The job is labelled with the task's identity
  ``(dag_id, task_id, run_id, map_index)``: a retry after a worker crash finds the job
  its earlier try started and waits for it; a retry after the job *failed* submits a
  fresh attempt. On Airflow 3.3+ the job's name is also kept in the task state store
  (``durable=True``, the ``ResumableJobMixin``), so a retry that finds the job already
  complete returns its outputs without waiting.
- **Waits** in the worker, streaming one step's log into the task log, or deferred to
  the triggerer (``deferrable=True``), where a shared watch serves every waiting task.
- **Explains failures**: the error names the reason, the failing step, pod, container
  reason and exit code, the job's warning events and the last lines of the log.
- **Cancels it** when the task is killed (``on_kill_action``: delete, suspend, keep),
  in the worker and, while deferred, in the triggerer.
- **Publishes** the outputs: the return value is the JobOutputs dict (name, namespace,
  status, steps, metrics, the training function's ``result``, duration), with the same
  parts under their own XCom keys.

Importing this module does not import the Kubernetes clients: DAG files import it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

from kf_trainer_airflow import _args
from kf_trainer_airflow._compat import AirflowException, BaseOperator, ResumableJobMixin, conf
from kf_trainer_airflow._spec import (
    SPEC_ARGUMENTS,
    TEMPLATED_SPEC_ARGUMENTS,
    assemble,
    looks_templated,
    template_form,
)
from kf_trainer_airflow.links.trainjob import LINK_XCOM_KEY, TrainJobLink
from kf_trainer_airflow.operators import _endings
from kf_trainer_airflow.provider_info import DEFAULT_CONN_ID

if TYPE_CHECKING:
    from airflow.sdk import Context

    from kf_trainer_airflow.hooks.trainer import KubeflowTrainerHook
    from kf_trainer_core.spec import TrainJobSpec
    from kf_trainer_core.tasks import JobOutputs, SyncTaskJob, TrainJob

#: Job states in which a retry waits for the job instead of submitting another.
ACTIVE_STATES = ("Created", "Running", "Suspended")
#: What the XCom keys besides ``return_value`` hold.
XCOM_KEYS = ("job_name", "namespace", "status", "steps", "metrics", "result", "cost")


class TrainJobFailedException(AirflowException):
    """The TrainJob failed, could not start, timed out or vanished. The message says
    why; ``failure`` holds the details as a dict (reason, message, step, pod,
    container_reason, exit_code, events, log_tail) when the cluster gave them."""

    def __init__(
        self,
        message: str,
        *,
        job_name: str | None = None,
        namespace: str | None = None,
        failure: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.job_name = job_name
        self.namespace = namespace
        self.failure = dict(failure) if failure else None


class TrainJobOperator(ResumableJobMixin, BaseOperator):
    """Run a Kubeflow Trainer TrainJob and wait for it.

    Give the job as the Kubeflow SDK's ``train()`` arguments — ``runtime``, ``trainer``
    (``CustomTrainer``, ``CustomTrainerContainer``, ``BuiltinTrainer``),
    ``initializer``, ``options`` — or as one ``spec`` (a ``TrainJobSpec``, its dict or
    JSON/YAML text). Models or their JSON form both work; strings inside are templated
    (``{{ ds }}``, XComs), the training function's source is not.

    :param spec: the whole job, instead of the four parts.
    :param runtime: runtime name (``torch-distributed``...) or ``RuntimeRef``.
    :param trainer: the trainer.
    :param initializer: dataset and model initializers.
    :param options: SDK options (``Labels``, ``RuntimePatch``, ``QueueName``...).
    :param func_args: keyword arguments for a ``CustomTrainer`` function, merged over
        the trainer's own (templated; handy with ``.expand()``).
    :param job_name: the TrainJob's exact name. Default: a stable name derived from
        the task instance, so retries find their job.
    :param namespace: the jobs' namespace (default: the connection's).
    :param kubeflow_trainer_conn_id: connection of type ``kubeflow_trainer`` (or
        ``kubernetes``).
    :param deferrable: wait in the triggerer instead of holding a worker slot.
    :param wait_for_completion: ``False`` submits and returns the job's name at once
        (watch it with :class:`~kf_trainer_airflow.sensors.trainjob.TrainJobSensor`).
    :param startup_timeout: fail when the job has not started running after this many
        seconds (images that cannot be pulled, pods that cannot be scheduled).
    :param admission_timeout: fail when Kueue has not admitted the job (labelled
        ``kueue.x-k8s.io/queue-name``) after this many seconds; the error says what the
        queue waits for. Queueing does not use up ``startup_timeout``.
    :param fail_fast_on: ``("configuration",)`` (default): a configuration failure is
        raised as ``AirflowFailException`` (no retry although the task has retries
        left); ``()`` leaves every failure to the task's retries. Other classes are a
        ``retry_policy``'s to decide (see :mod:`kf_trainer_airflow.failures`).
    :param job_timeout: the job's own time limit (``activeDeadlineSeconds``): past it,
        the Trainer fails the job with ``DeadlineExceeded``.
    :param wait_timeout: stop waiting after this many seconds (the job keeps running).
    :param get_logs: stream the log of ``log_step`` into the task log as it is written,
        from the worker or, deferred, from the triggerer.
    :param log_step: the step whose log is shown (``node-0``, ``dataset-initializer``...).
    :param log_tail: at most this many earlier lines are replayed when the log is first
        attached (or printed after a deferred wait, see ``log_while_deferred``).
    :param log_while_deferred: deferred waits: stream the log while the task is
        deferred (default). ``False``: print its last ``log_tail`` lines once the task
        resumes, as before.
    :param on_kill_action: what killing the task does to the job: ``delete`` (default),
        ``suspend`` (keep it, without pods) or ``keep`` (let it run).
    :param on_finish_action: after the job ends: ``keep`` it (default), ``delete`` it,
        or ``delete-succeeded`` (keep failed jobs for inspection).
    :param fresh_after_failure: a retry after a failed job submits a new attempt
        (default); ``False`` reports the same failure again.
    :param dashboard_url: link template with ``{namespace}`` and ``{name}`` (default:
        the connection's ``dashboard_url``).
    :param report_progress: log state changes and the trainer's progress and metrics.
    :param durable: Airflow 3.3+: keep the job's name in the task state store.
    :param resume_grace: deferred waits: a job that ends sooner than this many seconds
        after the task deferred is reported at that mark, so that Airflow has processed
        the deferring worker's exit before the task resumes (Airflow 3.3 fails the task
        otherwise: apache/airflow#72716). ``0`` reports at once.
    """

    template_fields: Sequence[str] = (
        *TEMPLATED_SPEC_ARGUMENTS,
        "job_name",
        "namespace",
        "dashboard_url",
    )
    template_fields_renderers: ClassVar[dict[str, str]] = {
        "spec": "json",
        "trainer": "json",
        "initializer": "json",
        "options": "json",
        "func_args": "json",
    }
    ui_color = "#4279f4"
    ui_fgcolor = "#ffffff"
    operator_extra_links = (TrainJobLink(),)
    #: The task state store key of the job's name (renaming it breaks in-flight retries).
    external_id_key = "kf_trainer_job"

    def __init__(
        self,
        *,
        spec: Any = None,
        runtime: Any = None,
        trainer: Any = None,
        initializer: Any = None,
        options: Any = None,
        func_args: Mapping[str, Any] | None = None,
        job_name: str | None = None,
        namespace: str | None = None,
        kubeflow_trainer_conn_id: str | None = DEFAULT_CONN_ID,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        wait_for_completion: bool = True,
        startup_timeout: float | timedelta | None = None,
        admission_timeout: float | timedelta | None = None,
        job_timeout: float | timedelta | None = None,
        wait_timeout: float | timedelta | None = None,
        get_logs: bool = True,
        log_step: str = "node-0",
        log_tail: int = 1000,
        on_kill_action: str = "delete",
        on_finish_action: str = "keep",
        fresh_after_failure: bool = True,
        dashboard_url: str | None = None,
        report_progress: bool = True,
        resume_grace: float | timedelta = _args.DEFAULT_RESUME_GRACE,
        fail_fast_on: Sequence[str] = ("configuration",),
        log_while_deferred: bool = True,
        **kwargs: Any,
    ) -> None:
        what = getattr(type(self), "custom_operator_name", None) or type(self).__name__
        _args.unknown_arguments(type(self), kwargs, what)
        super().__init__(**kwargs)
        if not isinstance(fail_fast_on, str):
            fail_fast_on = tuple(fail_fast_on)  # read once: it may be an iterator
        _args.operator_choices(on_kill_action, on_finish_action, log_tail, fail_fast_on)
        _args.options_list(options)
        _args.job_name(job_name)
        self.spec = template_form(spec, part="spec")
        self.runtime = template_form(runtime, part="runtime")
        self.trainer = template_form(trainer, part="trainer")
        self.initializer = template_form(initializer, part="initializer")
        self.options = template_form(options, part="options")
        self.func_args = dict(func_args) if isinstance(func_args, Mapping) else func_args
        self.job_name = job_name
        self.namespace = namespace
        self.kubeflow_trainer_conn_id = kubeflow_trainer_conn_id
        self.deferrable = deferrable
        self.wait_for_completion = wait_for_completion
        self.startup_timeout = _args.seconds(startup_timeout, "startup_timeout")
        self.admission_timeout = _args.seconds(admission_timeout, "admission_timeout")
        self.fail_fast_on = tuple(fail_fast_on)
        self.job_timeout = job_timeout
        _args.seconds(job_timeout, "job_timeout")
        self.wait_timeout = _args.seconds(wait_timeout, "wait_timeout")
        self.resume_grace = _args.seconds(resume_grace, "resume_grace", zero="allowed") or 0.0
        self.get_logs = get_logs
        self.log_step = _args.log_step(log_step)
        self.log_tail = log_tail
        self.log_while_deferred = log_while_deferred
        self.on_kill_action = on_kill_action
        self.on_finish_action = on_finish_action
        self.fresh_after_failure = fresh_after_failure
        self.dashboard_url = dashboard_url
        self.report_progress = report_progress
        self._job_name: str | None = None
        self._job_namespace: str | None = None
        self._outputs: JobOutputs | None = None
        self._published = False
        self._result: tuple[Any] | None = None
        self._job_uid: str | None = None
        self._task: SyncTaskJob | None = None
        # The task's identity once a try has made its hold on the job: a kill that comes
        # after execute() has ended (execution_timeout) finds the job by it.
        self._identity: tuple[str, str, str, int] | None = None
        if not self._templated():
            # Nothing left to render: a bad spec fails when the DAG is parsed, naming the
            # field and the fix, rather than when the task runs.
            self._check_name(self.build_spec())

    def _check_name(self, spec: TrainJobSpec) -> None:
        """A fixed name (``job_name`` or a ``Name`` option) that is too long for the
        job's pods fails now, as the builder would at submit time (the limit depends on
        the job's steps)."""
        from kf_trainer_core.spec import Name

        if spec.option(Name) is None:
            return
        from kf_trainer_core.errors import FieldProblem, SpecError
        from kf_trainer_core.tasks import build_trainjob

        try:
            build_trainjob(spec, namespace=self.namespace)
        except SpecError as err:
            if not self.job_name:
                raise
            # The builder knows job_name as the Name option it became: say job_name.
            problems = [
                FieldProblem("job_name" if p.field == "options.Name" else p.field, p.problem, p.fix)
                for p in err.problems
            ]
            raise SpecError(problems, title=err.title) from None

    def _templated(self) -> bool:
        return any(looks_templated(getattr(self, f)) for f in self.template_fields)

    # -- the spec ---------------------------------------------------------------------
    def build_spec(self) -> TrainJobSpec:
        """The :class:`TrainJobSpec` of the (rendered) arguments. Raises
        :class:`~kf_trainer_core.errors.SpecError` naming the field and the fix."""
        return assemble({name: getattr(self, name) for name in SPEC_ARGUMENTS})

    def render_manifest(self) -> str:
        """The TrainJob YAML this task would submit, built without a cluster (the name
        is the one a run called ``dry-run`` would get)."""
        from kf_trainer_core.tasks import build_trainjob

        identity = (self.dag_id, self.task_id, "dry-run", -1)
        built = build_trainjob(self.build_spec(), namespace=self.namespace, identity=identity)
        return built.yaml()

    def dry_run(self) -> None:
        """Render the TrainJob YAML into the log (and standard output): nothing is
        submitted."""
        text = self.render_manifest()
        self.log.info("TrainJob manifest of %s:\n%s", self.task_id, text)
        print(text)

    # -- connection -------------------------------------------------------------------
    @cached_property
    def hook(self) -> KubeflowTrainerHook:
        """The hook for this task's connection and namespace."""
        # Loaded here, not by the module: the hook imports the core's configuration
        # models, which a DAG file that only builds tasks need not pay for.
        from kf_trainer_airflow.hooks.trainer import KubeflowTrainerHook

        return KubeflowTrainerHook(self.kubeflow_trainer_conn_id, namespace=self.namespace)

    def _session(self, context: Context | None = None) -> SyncTaskJob:
        """The task's hold on its job, with its one client: made on first use in a try
        (the kubeconfig is read once), closed when the try's ``execute`` ends."""
        if self._task is None:
            from kf_trainer_core.tasks.lifecycle import SyncTaskJob, TaskJob, Terms

            if context is not None:
                self._identity = self.identity_of(context)
            job = TaskJob(
                self.build_spec() if context is not None else None,
                identity=self._identity,
                fresh_after_failure=self.fresh_after_failure,
                on_kill=self.on_kill_action,
                on_finish=self.on_finish_action,
                logger=self.log,
                terms=Terms("on_kill_action", "on_finish_action", "the task's next try"),
            )
            config = self.hook.get_backend_config()
            self._task = SyncTaskJob(job, config)
        if self._job_name is not None:
            self._task.job.knows(self._job_name)
        return self._task

    def _close_session(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.close()

    @contextlib.contextmanager
    def _held(self) -> Iterator[SyncTaskJob]:
        """The task's hold while ``execute`` runs; after it (a kill after
        ``execution_timeout``, lineage), one for this block."""
        opened = self._task is None
        try:
            yield self._session()
        finally:
            if opened:
                self._close_session()

    @staticmethod
    def identity_of(context: Context) -> tuple[str, str, str, int]:
        """The task instance's identity: the same for every try of it."""
        ti = context["ti"]
        map_index = getattr(ti, "map_index", -1)
        return (ti.dag_id, ti.task_id, ti.run_id, -1 if map_index is None else map_index)

    @property
    def _where(self) -> str:
        return f"TrainJob {self._job_namespace}/{self._job_name}"

    # -- the task ---------------------------------------------------------------------
    def execute(self, context: Context) -> Any:
        self._job_name = None
        self._identity = None
        self._job_uid = None
        self._outputs = None
        self._published = False
        self._result = None
        # The extra link reads this key when the task ends, even when it failed before
        # a job existed; an absent key is logged as an error ("XCom not found").
        context["ti"].xcom_push(key=LINK_XCOM_KEY, value="")
        # Checked once rendered (it is a template field), before anything is submitted.
        _args.dashboard_url(self.dashboard_url)
        try:
            return self.execute_resumable(context)
        finally:
            self._close_session()

    def submit_job(self, context: Context) -> str:
        """Create the job, or find the one an earlier try of this task created (the
        core's submit-or-reattach: a suspended attempt is resumed, a failed fixed-name
        job replaced)."""
        try:
            job = self._session(context).attach().job
        except Exception as err:
            # A configuration error before any job exists fails fast too (fail_fast_on).
            from kf_trainer_airflow.failures import refused_exception

            refused = refused_exception(err, self.fail_fast_on)
            if refused is None:
                raise
            raise refused from None
        self._attach(job, context)
        return job.name

    def _attach(self, job: TrainJob, context: Context) -> None:
        """Remember the job and publish its name, namespace and link (also for a try
        that reconnects without submitting)."""
        self._job_name, self._job_uid = job.name, job.uid
        self._job_namespace = job.namespace or self.hook.get_backend_config().resolve_namespace()
        if self._published:
            return
        self._published = True
        ti = context["ti"]
        ti.xcom_push(key="job_name", value=job.name)
        ti.xcom_push(key="namespace", value=self._job_namespace)
        url = self.hook.dashboard_url(job.name, self._job_namespace, self.dashboard_url)
        # Pushed even when empty: the link reads it when the task ends, and an absent
        # key would be logged as an error there.
        ti.xcom_push(key=LINK_XCOM_KEY, value=url or "")
        if url:
            self.log.info("%s: %s", self._where, url)

    def _reconnect(self, name: str, context: Context) -> None:
        """A try that found its job's name in the task state store: reattach to it (a
        job a killed try suspended is resumed) and publish it."""
        if self._job_name == name:
            return
        self._attach(self._session(context).reattach(name).job, context)

    def get_job_status(self, external_id: Any, context: Context) -> str:
        """The stored job's state; ``NotFound`` when the stored name no longer leads to
        the task's job (the core's :meth:`~kf_trainer_core.tasks.TaskJob.remembered`:
        gone, being deleted, or another's), so that the mixin submits — the core's
        submit-or-reattach, which decides as for every retry."""
        name = str(external_id)
        task = self._session(context)
        job = task.call(lambda c: task.job.remembered(c, name))
        return "NotFound" if job is None else job.status.value

    def is_job_active(self, status: str) -> bool:
        return status in ACTIVE_STATES

    def is_job_succeeded(self, status: str) -> bool:
        return status == "Complete"

    def poll_until_complete(self, external_id: Any, context: Context) -> Any:
        """Wait for the job — in the worker, or by deferring to the triggerer — and
        return the task's value (the mixin returns it as is when a try reconnects)."""
        name = str(external_id)
        self._reconnect(name, context)
        if not self.wait_for_completion:
            self.log.info(
                "%s submitted; not waiting for it (wait_for_completion=False)", self._where
            )
            return self.get_job_result(name, context)
        if self.deferrable:
            from kf_trainer_airflow.triggers.trainjob import TrainJobTrigger

            self.defer(
                trigger=TrainJobTrigger(
                    job_name=name,
                    namespace=str(self._job_namespace),
                    kubeflow_trainer_conn_id=self.kubeflow_trainer_conn_id,
                    status=("Complete",),
                    startup_timeout=self.startup_timeout,
                    admission_timeout=self.admission_timeout,
                    timeout=self.wait_timeout,
                    on_kill_action=self.on_kill_action,
                    report_progress=self.report_progress,
                    deferred_at=time.time(),
                    resume_grace=self.resume_grace,
                    # The log streamed from the triggerer (else its tail at the resume).
                    log_step=self.log_step if self.get_logs and self.log_while_deferred else None,
                    log_tail=self.log_tail,
                ),
                method_name="execute_complete",
            )
        self._outputs = self._wait_in_worker(context)
        return self.get_job_result(name, context)

    def _wait_in_worker(self, context: Context) -> JobOutputs:
        """One wait on the known job, its log streamed into the task log."""
        from kf_trainer_airflow.triggers.trainjob import ending
        from kf_trainer_core.tasks.jobs import ProgressLines

        step = self.log_step

        def on_log(line: str) -> None:
            self.log.info("[%s] %s", step, line)

        def said(line: str) -> None:  # a job's words hold "%": never a format
            self.log.info("%s", line)

        task = self._session(context)
        try:
            return task.wait(
                timeout=self.wait_timeout,
                startup_timeout=self.startup_timeout,
                admission_timeout=self.admission_timeout,
                on_log=on_log if self.get_logs else None,
                log_step=step,
                log_tail=self.log_tail,
                callbacks=[ProgressLines(said)] if self.report_progress else (),
            )
        except Exception as err:
            told = ending(err)  # as a deferred wait's event says it
            if told is None:
                raise
            _endings.fail_ended(self, task, told)

    def execute_complete(self, context: Context, event: Mapping[str, Any]) -> Any:
        """Resume after the trigger fired: publish the outputs, or fail with the
        reason. The log, shown while deferred, is not printed again."""
        self._job_name = str(event.get("job_name") or self._job_name)
        self._job_namespace = str(event.get("namespace") or self._job_namespace)
        try:
            if event.get("status") != "success":
                _endings.fail_event(self, event)
            if _endings.tail_at_resume(self, event):
                _endings.print_log_tail(self, self._session())
            from kf_trainer_core.tasks import JobOutputs

            self._outputs = JobOutputs.model_validate(event["outputs"])
            return self.get_job_result(self._job_name, context)
        finally:
            self._close_session()

    def get_job_result(self, external_id: Any, context: Context) -> Any:
        """Publish the outputs (XCom) and return the task's value (once per try)."""
        if self._result is not None:
            return self._result[0]
        name = str(external_id)
        self._reconnect(name, context)
        if not self.wait_for_completion:
            self._result = ({"job_name": name, "namespace": self._job_namespace},)
            return self._result[0]
        if self._outputs is None:
            self._outputs = self._session(context).call(lambda c: c.get_job_outputs(name))
        from kf_trainer_core.tasks.jobs import finished

        outputs = self._outputs
        finished(self.log, outputs)
        data = {**outputs.model_dump(mode="json"), "cost": outputs.cost()}
        ti = context["ti"]
        ti.xcom_push(key="job_name", value=data["name"])
        for key in XCOM_KEYS[1:]:
            ti.xcom_push(key=key, value=data[key])
        # on_finish_action only once the outputs are stored in Airflow (docs/retention.md).
        self._session(context).finish_outputs(outputs)
        self._result = (self.task_result(outputs),)
        return self._result[0]

    def task_result(self, outputs: JobOutputs) -> Any:
        """The task's return value (``return_value`` XCom): the JobOutputs dict."""
        return outputs.model_dump(mode="json")

    # -- lineage (called by the OpenLineage provider when it is installed) -------------
    def get_openlineage_facets_on_start(self) -> Any:
        """OpenLineage: the job's inputs (its initializers' storage) and the TrainJob."""
        from kf_trainer_airflow.lineage import task_lineage

        return task_lineage(self, "start")

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: inputs, the model the function returned under ``model_uri``,
        and the TrainJob (with its uid and final state)."""
        from kf_trainer_airflow.lineage import task_lineage

        return task_lineage(self, "complete")

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        """OpenLineage: inputs and the TrainJob of a failed task (no outputs)."""
        from kf_trainer_airflow.lineage import task_lineage

        return task_lineage(self, "failure")

    def on_kill(self) -> None:
        """The task is being killed (a user, ``execution_timeout``, SIGTERM): apply
        ``on_kill_action`` to the job — by name, or by the task's identity when it was
        killed before it learnt the name (also when Airflow calls this after
        ``execute`` has ended: ``execution_timeout``). A job that has just finished is
        kept: a cleared task collects its result."""
        if self._task is None and self._job_name is None and self._identity is None:
            return  # killed before it had a job: nothing to do
        from kf_trainer_core.tasks import TaskKilled

        # While execute() runs, this is Airflow's SIGTERM handler (or another thread).
        try:
            with self._held() as task:
                task.stop(TaskKilled("the task was killed"))
        except Exception:
            self.log.exception("Could not %s %s", self.on_kill_action, self._where)
