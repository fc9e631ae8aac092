"""Component factories: a TrainJob as a step of a Kubeflow Pipelines v2 pipeline.

- :func:`trainjob_component` turns a training function into a component whose inputs
  are the function's parameters (they become ``func_args``); the function's source is
  embedded in the component when it is made, as KFP does for its own lightweight
  components.
- :func:`trainjob_launcher` is the general launcher: runtime, trainer, initializer and
  options as JSON inputs (or a whole ``TrainJobSpec``).
- :func:`step_components` are the parts of a job as separate nodes: submit, wait for a
  step (initializers, then training), collect the outputs, cancel.

Every component that runs a job submits it under the identity ``(run, task, job_key)``
(a retried task reattaches to its job, a retry after a failed job starts a fresh
attempt), copies the training log into the task's log, fails with the reason, failing
step and last log lines, deletes its job when the task is terminated, and reports
``job_name``, ``namespace``, ``status``, ``result_json``, ``Output[Metrics]``,
``Output[Model]`` and an ``Output[Markdown]`` summary.

Importing this module imports neither ``kfp`` nor a Kubernetes library; making a
component imports ``kfp``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, Union

from kf_trainer_core.tasks import pysource, require

# Imported directly (not through the package's lazy names): the same one-line error.
require("kfp", "kfp", "kf_trainer_kfp", "Kubeflow Pipelines (kfp)")

import functools  # noqa: E402

from kf_trainer_core.errors import FieldProblem, SpecError  # noqa: E402
from kf_trainer_core.tasks.interruptions import check_action  # noqa: E402
from kf_trainer_kfp import inputs as inp  # noqa: E402
from kf_trainer_kfp._source import (  # noqa: E402
    JOB_OUTPUTS,
    REQUIRED,
    RESULT_ARTIFACTS,
    RESULT_OUTPUTS,
    SPEC_INPUTS,
    Param,
    backend_inputs,
    function_params,
    identity_inputs,
    render_function,
    wait_inputs,
)
from kf_trainer_kfp.image import ComponentImage  # noqa: E402

# The core's spec models, builder and configuration (pydantic: most of a second) load when
# a component is first defined, not when a pipeline file imports this module.
if TYPE_CHECKING:
    from kf_trainer_core.config import KubernetesConfig, LocalConfig
    from kf_trainer_core.spec import Initializer, RuntimeRef

Backend = Union["KubernetesConfig", "LocalConfig", Mapping[str, Any], None]
#: ``kf_trainer_core.spec.common.DEFAULT_RUNTIME``, written out so that a default argument
#: needs no spec import (a test checks that the two agree).
DEFAULT_RUNTIME = "torch-distributed"

_F = TypeVar("_F", bound=Callable[..., Any])


def suggest_keywords(func: _F) -> _F:
    """:func:`kf_trainer_core.fields._model.suggest_keywords`, applied on the first call (that
    module imports pydantic): a misspelt keyword is a ``SpecError`` with a suggestion."""
    checked: Callable[..., Any] | None = None

    @functools.wraps(func)
    def first(*args: Any, **kwargs: Any) -> Any:
        nonlocal checked
        if checked is None:
            from kf_trainer_core.tasks import suggest_keywords as checking

            checked = checking(func)
        return checked(*args, **kwargs)

    return first  # type: ignore[return-value]


_SPEC_INPUT_NAMES = tuple(p.name for p in SPEC_INPUTS)


# ------------------------------------------------------------------------ checks


def _backend_default(backend_config: Backend, namespace: str) -> dict[str, Any]:
    """A ``backend_config`` default in JSON form, refused if it holds credentials."""
    data: dict[str, Any] = inp.jsonable(backend_config) or {}
    inp.backend_config(data, namespace=namespace, environ={})
    return data


def _as_spec_error(field: str, err: ValueError) -> SpecError:
    if isinstance(err, SpecError):
        return err
    problem, _, how = str(err).partition(" Fix: ")
    return SpecError(FieldProblem(field, problem, how), title="Invalid component input")


def _check_constants(kind: str, args: Mapping[str, Any], constant: Callable[[Any], bool]) -> None:
    """Check what is known while the pipeline is defined, so that a bad argument fails
    there rather than in a pod."""
    known = {k: v for k, v in args.items() if constant(v)}
    if "backend_config" in known:
        ns = known.get("namespace", "")
        inp.backend_config(known["backend_config"], namespace=ns or "", environ={})
    for field in ("timeout_seconds", "startup_timeout_seconds", "admission_timeout_seconds"):
        if field in known:
            inp.seconds(known[field], field)
    for field in ("on_cancel", "action"):
        if field in known:
            check_action(str(known[field]), field)
    if "on_finish" in known:
        from kf_trainer_core.tasks import check_finish_action

        check_finish_action(str(known["on_finish"]))
    if "step" in known:
        try:
            from kf_trainer_core.tasks import helpers as task_helpers

            task_helpers.parse_step(str(known["step"]))
        except ValueError as err:
            raise _as_spec_error("step", err) from None
    if kind == "spec" and all(n in known for n in _SPEC_INPUT_NAMES if n in args):
        inp.spec_of_inputs(known)
    if kind == "prune":
        _check_prune_rules(known)


def _check_prune_rules(known: Mapping[str, Any]) -> None:
    """The prune rules known now, refused as ``prune`` would refuse them in the pod
    (``older_than=""``, ``keep_last=-1`` and ``limit=0`` mean "not given")."""
    from kf_trainer_core.tasks import PRUNE_OPTIONS, PruneRules

    rules = [name for name in PRUNE_OPTIONS if name != "dry_run"]
    try:
        options = inp.prune_options({k: known[k] for k in rules if k in known})
        if any(name not in known for name in rules):
            # A rule comes from a channel: whether any rule is set is known in the pod.
            options["honour_retention"] = True
        PruneRules.of(options)
    except ValueError as err:
        field = next((f for f in rules if str(err).startswith(f"{f}=")), "rules")
        raise _as_spec_error(field, err) from None


_PLACEHOLDERS = {
    inp.RUN_ID_INPUT: inp.RUN_ID_PLACEHOLDER,
    inp.TASK_NAME_INPUT: inp.TASK_NAME_PLACEHOLDER,
}


def _preparer(kind: str, params: Sequence[Param]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    names = {p.name for p in params}
    placeholders = {k: v for k, v in _PLACEHOLDERS.items() if k in names}
    floats = {p.name for p in params if p.annotation == "float"}
    submits = {"job_key", inp.TASK_NAME_INPUT} <= names

    def prepare(kwargs: dict[str, Any]) -> dict[str, Any]:
        from kf_trainer_kfp._component import in_loop, is_constant

        if submits and "job_key" not in kwargs and in_loop():
            raise SpecError(
                FieldProblem(
                    "job_key",
                    "every iteration of a dsl.ParallelFor runs a task of the same name, so "
                    "their TrainJobs would share one identity.",
                    "pass job_key=<the loop item> (or anything that tells the iterations apart).",
                ),
                title="Invalid component input",
            )
        args = {k: inp.jsonable(v) if is_constant(v) else v for k, v in kwargs.items()}
        for key in floats & args.keys():
            value = args[key]
            if isinstance(value, int) and not isinstance(value, bool):
                # KFP refuses an int constant for a float input; `timeout_seconds=3600`
                # means what it says.
                args[key] = float(value)
        job_key = args.get("job_key")
        if job_key is not None and not isinstance(job_key, str) and not is_constant(job_key):
            # A loop item of any type names the job: KFP accepts a channel of another
            # type for a str input only inside a string.
            args["job_key"] = f"{job_key}"
        for key, placeholder in placeholders.items():
            # Task arguments, not input defaults: KFP fills these placeholders in only
            # where a task passes them.
            args.setdefault(key, placeholder)
        _check_constants(kind, args, is_constant)
        return args

    return prepare


def _make(
    source: str, name: str, image: ComponentImage | None, kind: str, params: Sequence[Param]
) -> Any:
    from kf_trainer_kfp._component import make_component

    return make_component(source, name, image or ComponentImage(), _preparer(kind, params))


def _task_inputs(factory_args: Mapping[str, Any]) -> tuple[tuple[Param, ...], tuple[Param, ...]]:
    """The backend and wait inputs with the defaults a factory was given (its keyword
    arguments: ``backend_config``, ``namespace``, ``timeout_seconds``...), checked now."""
    args = factory_args
    namespace = args["namespace"]
    backend = backend_inputs(_backend_default(args["backend_config"], namespace), namespace)
    waits = wait_inputs(args)
    _check_constants("defaults", {p.name: p.default for p in waits}, lambda _v: True)
    return backend, waits


def _identifier(name: str) -> str:
    text = re.sub(r"\W+", "_", name.strip()).strip("_") or "trainjob"
    return f"trainjob_{text}" if text[0].isdigit() else text


# -------------------------------------------------------------------- factories


@suggest_keywords
def trainjob_launcher(
    *,
    component_image: ComponentImage | None = None,
    backend_config: Backend = None,
    namespace: str = "",
    timeout_seconds: float = 0.0,
    startup_timeout_seconds: float = 0.0,
    on_cancel: str = "delete",
    stream_logs: bool = True,
    name: str = "launch_trainjob",
    admission_timeout_seconds: float = 0.0,
    on_finish: str = "keep",
) -> Any:
    """The general launcher: one task that submits a TrainJob, streams its node-0 log,
    waits for it and reports its outputs.

    Inputs: ``spec`` (a whole ``TrainJobSpec`` as JSON, or the object itself when the
    pipeline passes a constant), ``runtime``, ``trainer``, ``initializer``,
    ``options``, ``func_args``, ``num_nodes``; ``backend_config``, ``namespace``;
    ``job_key``; ``timeout_seconds``, ``startup_timeout_seconds``,
    ``admission_timeout_seconds``, ``on_cancel``, ``stream_logs``, ``on_finish``. The
    keyword arguments here set those inputs' defaults.
    """
    backend, waits = _task_inputs(locals())
    params = [*SPEC_INPUTS, *backend, *identity_inputs(), *waits]
    func_name = _identifier(name)
    source = render_function(
        func_name,
        "launch",
        params,
        summary="Run a Kubeflow Trainer TrainJob: submit it, stream its log, wait, report.",
        artifacts=RESULT_ARTIFACTS,
        outputs=RESULT_OUTPUTS,
    )
    return _make(source, func_name, component_image, "spec", params)


@suggest_keywords
def trainjob_component(
    func: Callable[..., Any] | str,
    *,
    runtime: str | RuntimeRef = DEFAULT_RUNTIME,
    num_nodes: int | None = None,
    resources_per_node: dict[str, int | float | str] | None = None,
    packages_to_install: list[str] | None = None,
    pip_index_urls: list[str] | None = None,
    env: dict[str, Any] | None = None,
    image: str | None = None,
    num_proc_per_node: int | None = None,
    initializer: Initializer | Mapping[str, Any] | None = None,
    options: Sequence[Any] = (),
    backend_config: Backend = None,
    namespace: str = "",
    timeout_seconds: float = 0.0,
    startup_timeout_seconds: float = 0.0,
    on_cancel: str = "delete",
    stream_logs: bool = True,
    component_image: ComponentImage | None = None,
    name: str | None = None,
    admission_timeout_seconds: float = 0.0,
    on_finish: str = "keep",
) -> Any:
    """A component that runs ``func`` as a TrainJob (a ``CustomTrainer``).

    The function's parameters become the component's inputs (typed ``str``, ``int``,
    ``float``, ``bool``, ``list`` or ``dict``; literal defaults stay defaults) and reach
    the function as ``func_args``. ``num_nodes``, ``resources_per_node``,
    ``packages_to_install``, ``pip_index_urls``, ``env``, ``image`` and
    ``num_proc_per_node`` are the ``CustomTrainer``'s (for the training pods);
    ``component_image`` is the launcher pod's. A function that returns
    ``{"model_uri": ...}`` fills the ``Model`` output; the numbers it returns, the
    ``Metrics`` output.

    Bad settings raise :class:`SpecError` naming the field and the fix, here.
    """
    from kf_trainer_core.spec import CustomTrainer, TrainFunction, TrainJobSpec
    from kf_trainer_core.tasks import build_trainjob, capture_source, resolve_ref

    trainer_args: dict[str, Any] = {
        "num_nodes": num_nodes,
        "resources_per_node": resources_per_node,
        "packages_to_install": packages_to_install,
        "pip_index_urls": pip_index_urls,
        "env": env,
        "image": image,
        "num_proc_per_node": num_proc_per_node,
    }
    trainer = CustomTrainer(func, **{k: v for k, v in trainer_args.items() if v is not None})
    fn_name, source, ref = trainer.func.resolved()
    if source is None:
        # Imported in the training pod (embed=False): read the parameters from here.
        assert ref is not None
        _, params_source = capture_source(resolve_ref(ref))
    else:
        params_source = source
        trainer = trainer.model_copy(update={"func": TrainFunction(name=fn_name, source=source)})
    spec = TrainJobSpec(
        runtime=runtime,
        trainer=trainer,
        initializer=inp.jsonable(initializer) if initializer is not None else None,
        options=list(inp.jsonable(list(options))),
    )
    backend, waits = _task_inputs(locals())
    common = [*backend, *identity_inputs(), *waits]
    taken = [p.name for p in common] + [a for a, _, _ in RESULT_ARTIFACTS]
    taken += [o for o, _ in RESULT_OUTPUTS]
    params = function_params(params_source, fn_name, taken)
    defaults = {p.name: p.default for p in params if p.default is not REQUIRED}
    # Build once with the defaults: what the builder would refuse fails now.
    build_trainjob(inp.assemble_spec(spec.to_json_dict(), func_args=defaults))
    func_name = _identifier(name or fn_name)
    doc = ast.get_docstring(
        next(n for n in pysource.parse(params_source).body if isinstance(n, ast.FunctionDef))
    )
    headline = (doc or "").strip().splitlines()[0] if doc else ""
    all_params = [*params, *common]
    source_text = render_function(
        func_name,
        "launch",
        all_params,
        summary=f"Run `{fn_name}` as a Kubeflow Trainer TrainJob. {headline}".strip(),
        artifacts=RESULT_ARTIFACTS,
        outputs=RESULT_OUTPUTS,
        embedded={"spec": spec.to_json_dict(), "func_params": [p.name for p in params]},
    )
    return _make(source_text, func_name, component_image, "function", all_params)


@suggest_keywords
def prune_component(
    *,
    component_image: ComponentImage | None = None,
    backend_config: Backend = None,
    namespace: str = "",
    older_than: str = "",
    keep_last: int = -1,
    statuses: Sequence[str] = ("Complete", "Failed"),
    label_selector: str = "",
    identity_prefix: str = "",
    include_foreign: bool = False,
    honour_retention: bool = True,
    limit: int = 0,
    dry_run: bool = False,
    name: str = "prune_trainjobs",
) -> Any:
    """A maintenance component that deletes finished TrainJobs
    (``TrainerClient.prune_jobs``; docs/retention.md): never an unfinished one, never
    checkpoints. Put it in a pipeline and schedule that pipeline (a recurring run).

    Inputs (the keyword arguments here set their defaults): ``older_than`` (``"7d"``,
    ``"12h"``, seconds; ``""``: not a rule), ``keep_last`` (``-1``: not a rule),
    ``statuses``, ``label_selector``, ``identity_prefix``, ``include_foreign``,
    ``honour_retention`` (without other rules, each job's own ``Retention`` decides),
    ``limit`` (``0``: no cap), ``dry_run``; ``backend_config``, ``namespace``.
    Outputs: ``deleted`` (the names), ``report_json`` and a ``summary`` Markdown.
    """
    backend = backend_inputs(_backend_default(backend_config, namespace), namespace)
    rules = (
        Param("older_than", "str", older_than, "Finished longer ago than this (7d, 12h, 3600)."),
        Param("keep_last", "int", keep_last, "Keep the newest N attempts of each identity."),
        Param("statuses", "list", list(statuses), "Complete and/or Failed."),
        Param("label_selector", "str", label_selector, "Only jobs with these labels."),
        Param("identity_prefix", "str", identity_prefix, "Only identities starting so."),
        Param("include_foreign", "bool", include_foreign, "Also jobs the suite did not create."),
        Param("honour_retention", "bool", honour_retention, "Honour each job's Retention."),
        Param("limit", "int", limit, "Delete at most this many in one run; 0: no cap."),
        Param("dry_run", "bool", dry_run, "Only report what would be deleted."),
    )
    _check_prune_rules({p.name: p.default for p in rules})
    params = [*backend, *rules]
    func_name = _identifier(name)
    source = render_function(
        func_name,
        "prune",
        params,
        summary="Delete finished Kubeflow Trainer TrainJobs (never unfinished ones).",
        artifacts=(("summary", "Markdown", "What was deleted, and why."),),
        outputs=(("deleted", "list"), ("report_json", "str")),
    )
    return _make(source, func_name, component_image, "prune", params)


@dataclass(frozen=True)
class StepComponents:
    """The parts of a TrainJob as separate pipeline nodes.

    >>> steps = step_components()
    >>> job = steps.submit(spec=SPEC)
    >>> init = steps.wait_for_step(job_name=job.outputs["job_name"], step="initializer")
    >>> train = steps.wait_for_step(job_name=init.outputs["job_name"], step="trainer")
    >>> outs = steps.outputs(job_name=train.outputs["job_name"])
    """

    #: Submit (idempotently) and return ``job_name``, ``namespace``, ``status``.
    submit: Any
    #: Wait for ``step`` (``initializer``, ``dataset-initializer``,
    #: ``model-initializer``, ``trainer``) while streaming its log.
    wait_for_step: Any
    #: Wait for completion; ``Metrics``, ``Model``, summary, ``result_json``.
    outputs: Any
    #: Cancel a job by name, or by the task that submitted it (for exit handlers).
    cancel: Any


@suggest_keywords
def step_components(
    *,
    component_image: ComponentImage | None = None,
    backend_config: Backend = None,
    namespace: str = "",
    timeout_seconds: float = 0.0,
    startup_timeout_seconds: float = 0.0,
    on_cancel: str = "delete",
    stream_logs: bool = True,
    admission_timeout_seconds: float = 0.0,
    on_finish: str = "keep",
) -> StepComponents:
    """Make the step-level components (see :class:`StepComponents`); the keyword
    arguments set the defaults of their inputs."""
    backend, waits = _task_inputs(locals())
    job_name = Param("job_name", "str", REQUIRED, "Name of the TrainJob.")
    on_cancel_param = next(p for p in waits if p.name == "on_cancel")

    parts: dict[str, tuple[str, list[Param], dict[str, Any]]] = {
        "submit": (
            "submit",
            [*SPEC_INPUTS, *backend, *identity_inputs(), on_cancel_param],
            {
                "summary": "Submit a Kubeflow Trainer TrainJob (idempotently), without waiting.",
                "outputs": JOB_OUTPUTS,
            },
        ),
        "wait_for_step": (
            "wait_step",
            [
                job_name,
                Param(
                    "step",
                    "str",
                    "trainer",
                    "initializer, dataset-initializer, model-initializer or trainer (the job).",
                ),
                *backend,
                # A step's end is no place to delete the job: later steps read it.
                *(p for p in waits if p.name != "on_finish"),
            ],
            {
                "summary": "Wait for one step of a TrainJob, streaming its log.",
                "outputs": JOB_OUTPUTS,
            },
        ),
        "outputs": (
            "outputs",
            [
                job_name,
                *backend,
                *(p for p in waits if p.name in ("timeout_seconds", "on_cancel", "on_finish")),
            ],
            {
                "summary": "Wait for a TrainJob to finish; report its metrics, model and summary.",
                "artifacts": RESULT_ARTIFACTS,
                "outputs": RESULT_OUTPUTS,
            },
        ),
        "cancel": (
            "cancel",
            [
                Param("job_name", "str", "", "The TrainJob to cancel, or:"),
                Param(
                    "task_name",
                    "str",
                    "",
                    "The task (of this run) whose TrainJobs to cancel, e.g. in an exit handler.",
                ),
                Param("job_key", "str", "", "The job_key that task used."),
                Param("action", "str", "delete", "delete, suspend or keep."),
                *backend,
                next(p for p in identity_inputs() if p.name == inp.RUN_ID_INPUT),
            ],
            {
                "summary": "Cancel unfinished TrainJobs (finished ones are kept).",
                "outputs": (("cancelled", "list"),),
            },
        ),
    }
    names = {
        "submit": "submit_trainjob",
        "wait_for_step": "wait_for_trainjob_step",
        "outputs": "trainjob_outputs",
        "cancel": "cancel_trainjob",
    }
    made = {}
    for attr, (kind, params, extra) in parts.items():
        source = render_function(names[attr], kind, params, **extra)
        check = {"submit": "spec", "wait_for_step": "wait"}.get(attr, attr)
        made[attr] = _make(source, names[attr], component_image, check, params)
    return StepComponents(**made)
