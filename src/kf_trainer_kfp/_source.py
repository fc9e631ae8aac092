"""The Python source of the components' functions.

KFP builds a lightweight component from a function's source: it embeds that source in
the container command and, in the pod, imports it and calls the function with the
task's inputs. Our components are such functions, generated here: a signature that
declares the inputs and outputs KFP shows and passes, and a body that hands them to
:func:`kf_trainer_kfp.task.run_component`. Values fixed when the component is made
(the training function's source, its trainer settings) travel in the body as one JSON
string literal, so the pod needs nothing but this package to run it.

Nothing here imports ``kfp``.
"""

from __future__ import annotations

import ast
import json
import keyword
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kf_trainer_core.errors import FieldProblem, SpecError
from kf_trainer_core.tasks import pysource, shown
from kf_trainer_kfp.inputs import (
    RUN_ID_INPUT,
    RUN_ID_PLACEHOLDER,
    TASK_NAME_INPUT,
    TASK_NAME_PLACEHOLDER,
)


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


#: The default of an input that has none.
REQUIRED: Any = _Required()


@dataclass(frozen=True)
class Param:
    """One input of a component function."""

    name: str
    annotation: str
    default: Any = REQUIRED
    doc: str = ""


# ------------------------------------------------------------------ input groups

SPEC_INPUTS = (
    Param(
        "spec",
        "dict",
        {},
        "The whole training spec as JSON (TrainJobSpec(...).to_json_dict()); the inputs "
        "below replace or extend parts of it.",
    ),
    Param("runtime", "str", "", "Name of the ClusterTrainingRuntime (e.g. torch-distributed)."),
    Param(
        "trainer",
        "dict",
        {},
        "A CustomTrainer, CustomTrainerContainer or BuiltinTrainer as JSON.",
    ),
    Param("initializer", "dict", {}, "An Initializer (dataset, model) as JSON."),
    Param("options", "list", [], "Options as JSON (Labels, Annotations, QueueName ...)."),
    Param("func_args", "dict", {}, "Arguments merged into the CustomTrainer's func_args."),
    Param("num_nodes", "int", 0, "Training nodes; 0 keeps the spec's."),
)


def backend_inputs(
    backend_config: dict[str, Any] | None = None, namespace: str = ""
) -> tuple[Param, ...]:
    """Where the TrainJob runs."""
    return (
        Param(
            "backend_config",
            "dict",
            backend_config or {},
            "KubernetesConfig, LocalConfig or ContainerConfig as JSON; {} uses the pod's "
            "service account. "
            "Credentials come from the environment (KF_TRAINER_TOKEN ...), never from here.",
        ),
        Param("namespace", "str", namespace, "Namespace of the TrainJob; '' for the default."),
    )


def identity_inputs() -> tuple[Param, ...]:
    """What names the task's TrainJob, stably across retries."""
    return (
        Param("job_key", "str", "", "Tells apart the jobs of one task in a loop (the item)."),
        Param(RUN_ID_INPUT, "str", RUN_ID_PLACEHOLDER, "The pipeline run (set by KFP)."),
        Param(TASK_NAME_INPUT, "str", TASK_NAME_PLACEHOLDER, "The task (set by KFP)."),
    )


def wait_inputs(defaults: Mapping[str, Any] | None = None) -> tuple[Param, ...]:
    """How the task waits, and what happens to the job when the task is stopped. An
    input's default is its value in ``defaults`` (a factory's keyword arguments, which
    name these inputs) where it is there."""
    given = defaults or {}
    return (
        Param(
            "timeout_seconds",
            "float",
            float(given.get("timeout_seconds", 0.0)),
            "Fail after this long; 0 waits as long as the job runs.",
        ),
        Param(
            "startup_timeout_seconds",
            "float",
            float(given.get("startup_timeout_seconds", 0.0)),
            "Fail when the job has not started (pods scheduled and running) by then; 0: no limit.",
        ),
        Param(
            "admission_timeout_seconds",
            "float",
            float(given.get("admission_timeout_seconds", 0.0)),
            "Fail when Kueue has not admitted the job (labelled kueue.x-k8s.io/queue-name) "
            "by then, saying what the queue waits for; 0: no limit. Queueing does not use "
            "up the startup timeout.",
        ),
        Param(
            "on_cancel",
            "str",
            given.get("on_cancel", "delete"),
            "What happens to the TrainJob when the task is terminated or times out: delete, "
            "suspend or keep.",
        ),
        Param(
            "stream_logs",
            "bool",
            given.get("stream_logs", True),
            "Copy the training log into the task's log.",
        ),
        Param(
            "on_finish",
            "str",
            given.get("on_finish", "keep"),
            "What happens to the finished TrainJob once the task has written its outputs: "
            "keep (prune decides later), delete-succeeded, or delete (failed jobs too).",
        ),
    )


#: The artifacts of components that report a finished job.
RESULT_ARTIFACTS = (
    ("metrics", "Metrics", "trainerStatus metrics and the numbers the function returned."),
    ("model", "Model", "Points at the model_uri the function returned."),
    ("summary", "Markdown", "Status, steps, metrics and result of the TrainJob."),
)
RESULT_OUTPUTS = (
    ("job_name", "str"),
    ("namespace", "str"),
    ("status", "str"),
    ("result_json", "str"),
)
JOB_OUTPUTS = (("job_name", "str"), ("namespace", "str"), ("status", "str"))


# ------------------------------------------------------------------- rendering


def _literal(value: Any, where: str) -> str:
    text = repr(value)
    try:
        same = ast.literal_eval(pysource.parse_expression(text)) == value
    except (ValueError, SyntaxError):
        same = False
    if not same or (isinstance(value, float) and value != value):
        raise SpecError.single(
            where,
            f"the default {shown(value)} cannot be a KFP input default.",
            "use a JSON value: str, int, float, bool, list or dict.",
        )
    return text


def _docstring(text: str) -> str:
    body = text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    return f'    """{body}\n    """\n'


def render_function(
    name: str,
    kind: str,
    params: Sequence[Param],
    *,
    summary: str,
    artifacts: Sequence[tuple[str, str, str]] = (),
    outputs: Sequence[tuple[str, str]] = (),
    embedded: dict[str, Any] | None = None,
) -> str:
    """The source of a component function ``name`` whose body runs
    ``run_component(kind, inputs, artifacts, embedded)``."""
    lines = [f"def {name}(", "    *,"]
    for art, cls, _ in artifacts:
        lines.append(f"    {art}: Output[{cls}],")
    for p in params:
        default = "" if p.default is REQUIRED else f" = {_literal(p.default, p.name)}"
        lines.append(f"    {p.name}: {p.annotation}{default},")
    ret = ""
    if outputs:
        fields = ", ".join(f"({n!r}, {t})" for n, t in outputs)
        ret = f" -> NamedTuple('Outputs', [{fields}])"
    lines.append(f"){ret}:")
    doc = [summary.strip(), "", "Args:"]
    doc += [f"    {p.name}: {p.doc or p.name}" for p in params]
    doc += [f"    {art}: {text}" for art, _, text in artifacts]
    if outputs:
        doc += ["", "Returns:"] + [f"    {n}: {_OUTPUT_DOCS.get(n, n)}" for n, _ in outputs]
    source = "\n".join(lines) + "\n" + _docstring("\n    ".join(doc))
    inputs = ", ".join(f"{p.name!r}: {p.name}" for p in params)
    arts = ", ".join(f"{a!r}: {a}" for a, _, _ in artifacts)
    payload = json.dumps(embedded or {}, sort_keys=True)
    source += (
        # Imported here: KFP runs this function's source alone, after its own imports.
        "    from kf_trainer_kfp.task import run_component as _kf_run_component\n\n"
        "    return _kf_run_component(\n"
        f"        {kind!r},\n"
        f"        {{{inputs}}},\n"
        f"        {{{arts}}},\n"
        f"        {payload!r},\n"
        "    )\n"
    )
    return source


_OUTPUT_DOCS = {
    "job_name": "Name of the TrainJob.",
    "namespace": "Namespace of the TrainJob.",
    "status": "Status of the TrainJob (Complete, Running ...).",
    "result_json": "The training function's return value as JSON ('null' when none).",
    "cancelled": "Names of the TrainJobs that were cancelled.",
    "deleted": "Names of the TrainJobs that were deleted.",
    "report_json": "The prune report as JSON (selected, deleted, skipped, kept ...).",
}


# ------------------------------------------------------- training function inputs

_OPTIONAL = re.compile(r"^(?:typing\.)?Optional\[(.*)\]\Z")
_UNION_NONE = re.compile(
    r"^(?:typing\.)?Union\[(.*),\s*None\]\Z|^(.*?)\s*\|\s*None\Z|^None\s*\|\s*(.*)\Z"
)
_TYPE_NAMES = {
    "str": "str",
    "int": "int",
    "float": "float",
    "bool": "bool",
    "list": "list",
    "List": "list",
    "Sequence": "list",
    "tuple": "list",
    "Tuple": "list",
    "dict": "dict",
    "Dict": "dict",
    "Mapping": "dict",
}
_DEFAULT_TYPES = ((bool, "bool"), (int, "int"), (float, "float"), (str, "str"))


def parameter_type(annotation: str | None, default: Any, where: str) -> str:
    """The KFP parameter type of a training function's parameter, from its annotation
    text (``Optional`` and ``| None`` dropped), else from its default."""
    if annotation:
        text = annotation.strip().strip("'\"")
        for pattern in (_OPTIONAL, _UNION_NONE):
            match = pattern.match(text)
            if match:
                text = next(g for g in match.groups() if g).strip()
        base = text.removeprefix("typing.").removeprefix("collections.abc.").split("[", 1)[0]
        found = _TYPE_NAMES.get(base)
        if found is None:
            raise SpecError.single(
                where,
                f"the annotation {shown(annotation)} is not a type a KFP parameter can carry.",
                "annotate it str, int, float, bool, list or dict (JSON values); pass files "
                "and models as URIs (str).",
            )
        return found
    if default is REQUIRED or default is None:
        raise SpecError.single(
            where,
            "the parameter has neither an annotation nor a default, so its KFP type is unknown.",
            "annotate it: str, int, float, bool, list or dict.",
        )
    for cls, name in _DEFAULT_TYPES:
        if isinstance(default, cls):
            return name
    return "list" if isinstance(default, (list, tuple)) else "dict"


def function_params(source: str, name: str, reserved: Sequence[str]) -> list[Param]:
    """The inputs a training function's parameters become: name, KFP type and
    default (which must be a literal), read from its source."""
    tree = pysource.parse(source)
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    args = node.args
    problems: list[FieldProblem] = []
    if args.vararg or args.kwarg:
        problems.append(
            FieldProblem(
                "func",
                f"`{name}` takes *args or **kwargs; only named parameters can be component inputs.",
                "list the parameters by name.",
            )
        )
    if args.posonlyargs:
        problems.append(
            FieldProblem(
                "func",
                f"`{name}` has positional-only parameters; the job passes arguments by name.",
                "drop the `/`.",
            )
        )
    positional = [*args.posonlyargs, *args.args]
    pos_defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults)) + list(
        args.defaults
    )
    pairs = list(zip(positional, pos_defaults, strict=True)) + list(
        zip(args.kwonlyargs, args.kw_defaults, strict=True)
    )
    params: list[Param] = []
    for arg, default_node in pairs:
        where = f"func.{arg.arg}"
        if arg.arg in reserved or arg.arg.startswith("_kf") or keyword.iskeyword(arg.arg):
            problems.append(
                FieldProblem(
                    where,
                    f"the parameter name {shown(arg.arg)} is taken by an input or output of the "
                    "component.",
                    f"rename the parameter (taken: {', '.join(sorted(reserved))}).",
                )
            )
            continue
        default: Any = REQUIRED
        if default_node is not None:
            try:
                default = ast.literal_eval(default_node)
            except ValueError:
                problems.append(
                    FieldProblem(
                        where,
                        f"the default `{ast.unparse(default_node)}` is not a literal, and "
                        "component defaults are JSON values.",
                        "use a literal default (number, string, list, dict, None).",
                    )
                )
                continue
        annotation = ast.unparse(arg.annotation) if arg.annotation is not None else None
        try:
            kind = parameter_type(annotation, default, where)
        except SpecError as err:
            problems.extend(err.problems)
            continue
        if isinstance(default, tuple):
            default = list(default)
        params.append(Param(arg.arg, kind, default, f"Argument `{arg.arg}` of `{name}`."))
    if problems:
        raise SpecError(problems, title=f"Cannot make a component of `{name}`")
    return params
