"""Component inputs: their names, and turning their values into a training spec, a
backend configuration and an orchestrator identity.

The same functions run twice: when a pipeline calls a component with constant
arguments (so a bad spec fails while the pipeline is being defined, before anything is
compiled or submitted) and inside the component's pod. This module imports neither
``kfp`` nor a Kubernetes client.
"""

from __future__ import annotations

import copy
import functools
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from kf_trainer_core.errors import FieldProblem, SpecError
from kf_trainer_core.tasks import seconds as duration
from kf_trainer_core.tasks import shown

# The spec and configuration models (pydantic, most of a second to import) load when a
# function below first needs them: a pipeline file that imports the components pays
# for them when it defines a component, not at import.
if TYPE_CHECKING:
    from kf_trainer_core.config import KubernetesConfig, LocalConfig
    from kf_trainer_core.spec import TrainJobSpec
    from kf_trainer_core.tasks import PruneOptions

#: KFP's runtime placeholders (``dsl.PIPELINE_JOB_ID_PLACEHOLDER`` and
#: ``dsl.PIPELINE_TASK_NAME_PLACEHOLDER``), written out so that this module needs no
#: ``kfp`` import. KFP replaces them when they are a task's argument.
RUN_ID_PLACEHOLDER = "{{$.pipeline_job_uuid}}"
TASK_NAME_PLACEHOLDER = "{{$.pipeline_task_name}}"

RUN_ID_INPUT = "pipeline_run_id"
TASK_NAME_INPUT = "pipeline_task_name"

#: Secrets reach the component's pod as environment variables, set from Kubernetes
#: Secrets with ``kfp.kubernetes.use_secret_as_env``; never as pipeline parameters,
#: which KFP stores and shows in its UI.
TOKEN_ENV = "KF_TRAINER_TOKEN"
KUBECONFIG_CONTENT_ENV = "KF_TRAINER_KUBECONFIG_CONTENT"
CA_CERT_DATA_ENV = "KF_TRAINER_CA_CERT_DATA"
_SECRET_FIELDS = {"token": TOKEN_ENV, "kubeconfig_content": KUBECONFIG_CONTENT_ENV}

#: The prefix of every identity this adapter submits under.
IDENTITY_PREFIX = "kfp"


def jsonable(value: Any) -> Any:
    """A component argument in JSON form: spec models (``TrainJobSpec``,
    ``CustomTrainer``, ``Labels`` ...) become their JSON dicts, recursively."""
    from pydantic import BaseModel

    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    return value


def assemble_spec(
    spec: Mapping[str, Any] | None = None,
    *,
    runtime: str = "",
    trainer: Mapping[str, Any] | None = None,
    initializer: Mapping[str, Any] | None = None,
    options: list[Any] | None = None,
    func_args: Mapping[str, Any] | None = None,
    num_nodes: int = 0,
) -> TrainJobSpec:
    """The training spec of the launcher's inputs: ``spec`` (a whole ``TrainJobSpec``
    in JSON form) with ``runtime``, ``trainer`` and ``initializer`` replacing its
    parts, ``options`` added (a single-valued option replaces its kind),
    ``func_args`` merged into the ``CustomTrainer``'s and ``num_nodes`` (when > 0)
    set on the trainer. Raises :class:`SpecError` naming the field and the fix."""
    from kf_trainer_core.spec import TrainJobSpec, trainer_type

    data: dict[str, Any] = copy.deepcopy(dict(jsonable(spec) or {}))
    if runtime:
        data["runtime"] = runtime
    if trainer:
        data["trainer"] = copy.deepcopy(jsonable(dict(trainer)))
    if initializer:
        data["initializer"] = jsonable(dict(initializer))
    problems: list[FieldProblem] = []
    current = data.get("trainer")
    # A hand-written trainer may leave out its tag: the spec's rule tells its kind.
    kind = trainer_type(current) if isinstance(current, dict) else None
    if func_args:
        if not isinstance(current, dict) or kind != "CustomTrainer":
            problems.append(
                FieldProblem(
                    "func_args",
                    "func_args are the arguments of a CustomTrainer function, and the spec "
                    "has no CustomTrainer.",
                    "give a CustomTrainer trainer (with `func`), or drop func_args.",
                )
            )
        else:
            current["func_args"] = {**(current.get("func_args") or {}), **jsonable(func_args)}
    if num_nodes < 0:
        problems.append(FieldProblem("num_nodes", f"{num_nodes} nodes.", "use 0 (the spec's)."))
    elif num_nodes > 0:
        if not isinstance(current, dict):
            problems.append(
                FieldProblem("num_nodes", "the spec has no trainer to size.", "add a trainer.")
            )
        elif kind == "BuiltinTrainer":
            current.setdefault("config", {})["num_nodes"] = num_nodes
        else:
            current["num_nodes"] = num_nodes
    if problems:
        raise SpecError(problems)
    parsed = TrainJobSpec.parse(data)
    if options:
        extra = TrainJobSpec.parse({"options": jsonable(list(options))}).options
        parsed = parsed.with_options(*extra)
    return parsed


def spec_of_inputs(values: Mapping[str, Any]) -> TrainJobSpec:
    """The spec a task's spec inputs (``spec``, ``runtime``, ``trainer``,
    ``initializer``, ``options``, ``func_args``, ``num_nodes``) describe."""
    return assemble_spec(
        values.get("spec"),
        runtime=values.get("runtime", ""),
        trainer=values.get("trainer"),
        initializer=values.get("initializer"),
        options=values.get("options"),
        func_args=values.get("func_args"),
        num_nodes=int(values.get("num_nodes") or 0),
    )


def backend_config(
    value: Mapping[str, Any] | None,
    *,
    namespace: str = "",
    environ: Mapping[str, str] | None = None,
) -> KubernetesConfig | LocalConfig:
    """The backend of a ``backend_config`` input (``{}``: in-cluster credentials or
    the usual kubeconfig discovery; ``{"backend": "local", ...}``: this machine).

    Tokens and kubeconfig contents in the parameter are refused — KFP stores and shows
    parameters — and read from the environment instead (``KF_TRAINER_TOKEN``,
    ``KF_TRAINER_KUBECONFIG_CONTENT``, ``KF_TRAINER_CA_CERT_DATA``)."""
    from kf_trainer_core.config import KubernetesConfig, parse_backend

    data = dict(jsonable(value) or {})
    refuse_secrets(data)
    if namespace:
        data["namespace"] = namespace
    if data.get("backend") in ("local", "container"):
        return parse_backend(data)
    env = os.environ if environ is None else environ
    for fld, var in (*_SECRET_FIELDS.items(), ("ca_cert_data", CA_CERT_DATA_ENV)):
        if env.get(var) and not data.get(fld):
            data[fld] = env[var]
    return KubernetesConfig.parse(data)


def refuse_secrets(data: Mapping[str, Any]) -> None:
    """Refuse credentials in a ``backend_config`` parameter, with the way to pass them."""
    problems = [
        FieldProblem(
            f"backend_config.{fld}",
            "credentials in a pipeline parameter are stored by KFP and shown in its UI.",
            f"put it in a Kubernetes Secret and expose it to the task as {var}: "
            f"kfp.kubernetes.use_secret_as_env(task, secret_name=..., "
            f"secret_key_to_env={{'<key>': '{var}'}}).",
        )
        for fld, var in _SECRET_FIELDS.items()
        if data.get(fld)
    ]
    if problems:
        raise SpecError(problems, title="Invalid component input")


#: A timeout input as seconds: ``0`` (a KFP parameter cannot be ``None``) is no limit.
seconds = functools.partial(duration, zero="no limit", title="Invalid component input")


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def prune_options(values: Mapping[str, Any]) -> PruneOptions:
    """The prune options that the prune component's inputs in ``values`` give.

    A KFP parameter cannot be ``None``, so a rule left out arrives as its "not given"
    value: ``""`` (``older_than``, ``label_selector``, ``identity_prefix``), ``-1``
    (``keep_last``), ``0`` (``limit``) or an empty list (``statuses``); those become
    options left out, which take ``prune_jobs``' defaults. Inputs not in ``values`` stay
    out too (a rule from an upstream task is known only in the pod)."""
    options: dict[str, Any] = {}
    for name in ("older_than", "label_selector", "identity_prefix"):
        if values.get(name):
            options[name] = values[name] if name == "older_than" else str(values[name])
    statuses = values.get("statuses")
    if statuses:
        options["statuses"] = statuses if isinstance(statuses, str) else tuple(statuses)
    # Counts pass as given (``prune_jobs`` refuses what is no whole number, naming it).
    keep_last = values.get("keep_last")
    if not (keep_last is None or (_int(keep_last) and keep_last < 0)):
        options["keep_last"] = keep_last
    if values.get("limit"):
        options["limit"] = values["limit"]
    for name in ("include_foreign", "honour_retention", "dry_run"):
        if name in values:
            options[name] = bool(values[name])
    return cast("PruneOptions", options)


def identity(run_id: str, task_name: str, job_key: str = "") -> tuple[str, ...]:
    """The orchestrator identity of a task of a pipeline run: stable across retries
    of the task, different for every run and task (and ``job_key``, for loops)."""
    problems = []
    for field, value, constant in (
        (RUN_ID_INPUT, run_id, "dsl.PIPELINE_JOB_ID_PLACEHOLDER"),
        (TASK_NAME_INPUT, task_name, "dsl.PIPELINE_TASK_NAME_PLACEHOLDER"),
    ):
        if not value or "{{$" in value:
            problems.append(
                FieldProblem(
                    field,
                    f"{shown(value)}: KFP did not fill in the pipeline run's identity, so a "
                    "retried task could not find its TrainJob again.",
                    f"pass {field}={constant} when calling the component in a pipeline (the "
                    "components made by kf_trainer_kfp do it themselves; a component loaded "
                    "from YAML does not).",
                )
            )
    if problems:
        raise SpecError(problems, title="Invalid component input")
    parts = (IDENTITY_PREFIX, run_id, task_name)
    return (*parts, job_key) if job_key else parts
