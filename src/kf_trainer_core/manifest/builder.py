"""Spec → TrainJob manifest: pure and deterministic (the same inputs give the same
bytes), with the checks that the CRD, the Trainer's webhooks and the JobSet
controller would otherwise report only after submission, or never.

>>> built = build_trainjob(spec, identity=("my_dag", "train", "2026-01-01"))
>>> print(render_yaml(built.manifest))
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any

import yaml

from kf_trainer_core.base import marks
from kf_trainer_core.base.errors import FieldProblem, SpecError
from kf_trainer_core.base.quoting import shown
from kf_trainer_core.fields import checks, names
from kf_trainer_core.fields._model import field_problem
from kf_trainer_core.fields.retention import ANNOTATIONS as RETENTION_ANNOTATIONS
from kf_trainer_core.fields.retention import Retention
from kf_trainer_core.k8s.trainjob import TRAINER_API, TRAINER_GROUP
from kf_trainer_core.manifest.lineage import LINEAGE_INPUTS_ANNOTATION, inputs_annotation
from kf_trainer_core.manifest.runtimes import GPU_RESOURCE, MIG_PREFIX, RuntimeInfo
from kf_trainer_core.spec import (
    ANNOTATIONS_LIMIT,
    KUEUE_QUEUE_LABEL,
    ActiveDeadlineSeconds,
    Annotations,
    BuiltinTrainer,
    CustomTrainer,
    DataCacheInitializer,
    HuggingFaceDatasetInitializer,
    HuggingFaceModelInitializer,
    Labels,
    ManagedBy,
    Name,
    QueueName,
    RuntimePatch,
    S3DatasetInitializer,
    S3ModelInitializer,
    SecretKeyRef,
    Suspend,
    TorchTuneConfig,
    TrainerArgs,
    TrainerCommand,
    TrainJobSpec,
    checkpoint_storage,
)
from kf_trainer_core.spec import function as fn

KIND = "TrainJob"


#: Labels and annotations the suite puts on every TrainJob it builds (from
#: :mod:`kf_trainer_core.base.marks`, named here as before).
MANAGED_BY_LABEL = marks.MANAGED_BY_LABEL
MANAGED_BY_VALUE = marks.MANAGED_BY_VALUE
IDENTITY_LABEL = marks.IDENTITY_LABEL
IDENTITY_ANNOTATION = marks.IDENTITY_ANNOTATION
SPEC_HASH_ANNOTATION = marks.SPEC_HASH_ANNOTATION
ATTEMPT_ANNOTATION = marks.ATTEMPT_ANNOTATION
PROGRESS_ANNOTATION = marks.PROGRESS_ANNOTATION
PROGRESS_FROM_LOG = marks.PROGRESS_FROM_LOG

WORKSPACE = "/workspace"
DATASET_PATH = f"{WORKSPACE}/dataset"
MPI_HOME = "/home/mpiuser"
TORCHTUNE_COMMAND = ("tune", "run")

# Linux refuses to exec an argument longer than MAX_ARG_STRLEN (32 pages = 128 KiB),
# and the program travels as one argument.
_MAX_PROGRAM_BYTES = 128 * 1024
_TRAINER_OWNED_CONTAINERS = {names.NODE, names.DATASET_INITIALIZER, names.MODEL_INITIALIZER}
_RESOURCE_ALIASES = {"gpu": GPU_RESOURCE, "storage": "ephemeral-storage"}
_STANDARD_RESOURCES = {"cpu", "memory", "gpu", "storage", "ephemeral-storage"}
_ASCII_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class BuiltTrainJob:
    """A TrainJob manifest and what was decided while building it."""

    manifest: dict[str, Any]
    name: str
    namespace: str | None
    spec_hash: str
    runtime: RuntimeInfo
    identity: str | None = None
    warnings: tuple[str, ...] = field(default_factory=tuple)

    def yaml(self) -> str:
        """The manifest as YAML, as the cluster would receive it."""
        return render_yaml(self.manifest)


def identity_text(identity: str | Sequence[str | int | None] | None) -> str | None:
    """The canonical text of an orchestrator identity (parts joined by '/')."""
    if identity is None:
        return None
    # Typed as text or a sequence, but callers (DAGs, flows, JSON) pass anything.
    given: Any = identity
    flat = isinstance(given, (str, bytes, bytearray)) or not isinstance(given, Sequence)
    parts: Sequence[Any] = [given] if flat else given
    bad = [p for p in parts if not _identity_part(p)]
    if bad:
        raise SpecError.single(
            "identity",
            "identity parts must be scalars (strings, numbers, ids, dates or None) with a "
            f"stable text; got a {type(bad[0]).__name__}.",
            "pass the orchestrator's ids, e.g. (dag_id, task_id, run_id, map_index); "
            "turn other values into strings yourself.",
        )
    text = (
        identity
        if isinstance(identity, str)
        else "/".join("" if p is None else str(p) for p in parts)
    )
    if not text.strip("/"):
        raise SpecError.single(
            "identity",
            "the identity is empty.",
            "pass the orchestrator's ids, e.g. (dag_id, task_id, run_id), or leave identity out.",
        )
    return text


def _identity_part(part: Any) -> bool:
    """Whether ``part`` has one stable text: containers (a dict's text depends on how it
    was built) and objects printed as ``<... at 0x...>`` have not."""
    if part is None or isinstance(part, (str, int, float)):
        return True
    if isinstance(part, (Mapping, Set, list, tuple, bytes, bytearray)):
        return False
    kind: Any = type(part)
    return bool(kind.__str__ is not object.__str__ or kind.__repr__ is not object.__repr__)


def identity_label_value(identity: str) -> str:
    """Label values are limited to 63 characters: label the identity by its digest."""
    return hashlib.sha256(identity.encode()).hexdigest()[:40]


def build_trainjob(
    spec: TrainJobSpec | Mapping[str, Any] | str,
    *,
    namespace: str | None = None,
    name: str | None = None,
    identity: str | Sequence[str | int | None] | None = None,
    name_prefix: str = "",
    runtime: RuntimeInfo | None = None,
    attempt: int = 0,
    retention: Retention | None = None,
) -> BuiltTrainJob:
    """Build the TrainJob manifest for ``spec``.

    The name is, in order: the spec's ``Name`` option, ``name``, one derived from
    ``identity`` (stable across retries), or one derived from the spec's content.
    ``attempt`` > 0 names a fresh attempt for the same identity (after a failed job),
    labelled with the same identity so that all attempts are found together.
    ``runtime`` is what the cluster says about the runtime; without it the builder uses
    what the Trainer's default runtimes hold and checks names against the strictest
    limit that could apply. ``retention`` is the backend's default
    :class:`~kf_trainer_core.fields.retention.Retention`; the spec's own option wins.

    Raises :class:`SpecError` naming every field at fault, before anything is submitted.
    """
    if not isinstance(spec, TrainJobSpec):
        spec = TrainJobSpec.parse(spec)
    if namespace is not None:
        checks.check_namespace(namespace)
    rt = runtime or RuntimeInfo.guess(spec.runtime.name, spec.runtime.kind.value)
    problems: list[FieldProblem] = []
    warnings: list[str] = []

    trainer = _trainer(spec, rt, problems)
    body: dict[str, Any] = {
        "runtimeRef": {
            "name": spec.runtime.name,
            "apiGroup": TRAINER_GROUP,
            "kind": spec.runtime.kind.value,
        },
    }
    if trainer:
        body["trainer"] = trainer
    initializer = _initializer(spec, rt, problems)
    if initializer:
        body["initializer"] = initializer

    labels: dict[str, str] = {MANAGED_BY_LABEL: MANAGED_BY_VALUE}
    annotations: dict[str, str] = {}
    patches: list[dict[str, Any]] = []
    for i, opt in enumerate(spec.options):
        if isinstance(opt, Labels):
            labels.update(opt.labels)
        elif isinstance(opt, Annotations):
            annotations.update(opt.annotations)
        elif isinstance(opt, QueueName):
            labels[KUEUE_QUEUE_LABEL] = opt.queue
        elif isinstance(opt, ActiveDeadlineSeconds):
            body["activeDeadlineSeconds"] = opt.seconds
        elif isinstance(opt, Suspend):
            body["suspend"] = opt.suspend
        elif isinstance(opt, ManagedBy):
            body["managedBy"] = opt.managed_by
        elif isinstance(opt, TrainerCommand):
            body.setdefault("trainer", {})["command"] = list(opt.command)
        elif isinstance(opt, TrainerArgs):
            body.setdefault("trainer", {})["args"] = list(opt.args)
        elif isinstance(opt, RuntimePatch):
            patches.append(_runtime_patch(opt, f"options[{i}]", rt, problems))
    if patches:
        body["runtimePatches"] = patches
    if isinstance(spec.trainer, CustomTrainer):
        try:
            _, source, ref = spec.trainer.func.resolved()
        except ValueError:  # reported by _trainer() already
            source, ref = None, None
        if fn.uses_reporter(source, ref):
            annotations.setdefault(PROGRESS_ANNOTATION, PROGRESS_FROM_LOG)

    ident = identity_text(identity)
    named = f"{ident}/attempt-{attempt}" if ident is not None and attempt else ident
    content = {"spec": body, "labels": labels, "annotations": annotations}
    ckpt = spec.option(checkpoint_storage.Checkpoints)
    if ckpt is not None:  # a content-named job's name must depend on it too
        content["checkpoints"] = ckpt.model_dump(mode="json")
    job_name = _job_name(spec, name, named, name_prefix, content, rt, problems)
    checkpoint_storage.apply(
        ckpt,
        body,
        annotations,
        namespace=namespace,
        identity=ident or job_name,
        replicated_jobs=rt.replicated_jobs,
        where="options.Checkpoints",
        problems=problems,
    )
    if ident is not None:
        labels[IDENTITY_LABEL] = identity_label_value(ident)
        annotations[IDENTITY_ANNOTATION] = ident
        if attempt:
            annotations[ATTEMPT_ANNOTATION] = str(attempt)

    if problems:
        raise SpecError(problems, title="Cannot build the TrainJob")

    metadata: dict[str, Any] = {"name": job_name}
    if namespace:
        metadata["namespace"] = namespace
    metadata["labels"] = labels
    metadata["annotations"] = annotations
    # Derived from the initializers (already in the spec): kept out of the spec hash.
    lineage = inputs_annotation(spec, k8s_namespace=namespace)
    if lineage is not None:
        annotations[LINEAGE_INPUTS_ANNOTATION] = lineage
    # How long the job stays once finished: read by prune, kept out of the spec hash
    # (a rerun with another retention is the same job, not a conflicting one).
    chosen = spec.option(Retention) or retention
    if chosen is not None:
        annotations.update(chosen.annotations())
    manifest: dict[str, Any] = {
        "apiVersion": TRAINER_API,
        "kind": KIND,
        "metadata": metadata,
        "spec": body,
    }
    digest = spec_hash(manifest)
    annotations[SPEC_HASH_ANNOTATION] = digest
    size = sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())
    if size > ANNOTATIONS_LIMIT:
        raise SpecError.single(
            "options.Annotations",
            f"the TrainJob's annotations (with the identity the suite records) take "
            f"{size // 1024} KiB; the API server allows {ANNOTATIONS_LIMIT // 1024} KiB.",
            "annotate references to large data instead of the data, or shorten the identity.",
            title="Cannot build the TrainJob",
        )
    if not rt.known:
        warnings.append(
            f"runtime {rt.name!r} is not a default runtime and was not read from the cluster; "
            "name limits and the launcher were guessed."
        )
    return BuiltTrainJob(
        manifest=manifest,
        name=job_name,
        namespace=namespace,
        spec_hash=digest,
        runtime=rt,
        identity=ident,
        warnings=tuple(warnings),
    )


def spec_hash(manifest: Mapping[str, Any]) -> str:
    """A stable digest of what a TrainJob asks for: its spec, labels and annotations
    (less the hash itself, the lineage derived from the spec and the retention). Two
    builds of the same spec share it; any change that would make a different job
    changes it."""
    meta = manifest.get("metadata") or {}
    annotations = {
        k: v
        for k, v in (meta.get("annotations") or {}).items()
        if k not in (SPEC_HASH_ANNOTATION, LINEAGE_INPUTS_ANNOTATION, *RETENTION_ANNOTATIONS)
    }
    payload = {
        "spec": manifest.get("spec") or {},
        "labels": meta.get("labels") or {},
        "annotations": annotations,
    }
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def render_yaml(manifest: Mapping[str, Any]) -> str:
    """YAML of a manifest, multi-line strings (programs) as literal blocks."""
    return yaml.dump(dict(manifest), Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)


class _Dumper(yaml.SafeDumper):
    pass


def _str_presenter(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    # Literal blocks cannot carry trailing spaces or tabs faithfully: quote those.
    if "\n" in data and not any(line != line.rstrip() for line in data.splitlines()):
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", data)


_Dumper.add_representer(str, _str_presenter)


# ------------------------------------------------------------------------------ name


def _job_name(
    spec: TrainJobSpec,
    explicit: str | None,
    ident: str | None,
    prefix: str,
    content: dict[str, Any],
    rt: RuntimeInfo,
    problems: list[FieldProblem],
) -> str:
    opt = spec.option(Name)
    limit, why = _name_limit(spec, rt)
    chosen = opt.name if opt is not None else explicit
    if chosen is not None:
        where = "options.Name" if opt is not None else "name"
        problem = names.name_problem(chosen, limit, why)
        if problem:
            problems.append(field_problem(where, problem))
        return chosen
    if not prefix and isinstance(spec.trainer, CustomTrainer) and spec.trainer.func.name:
        prefix = spec.trainer.func.name
    if ident is None:
        # No identity: name the job after its content (spec, labels, annotations), so the
        # same request maps to one job and a different one to another.
        ident = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()
    return names.name_from_identity(ident, prefix=prefix or "trainjob", limit=limit)


def _name_limit(spec: TrainJobSpec, rt: RuntimeInfo) -> tuple[int, str]:
    if rt.known:
        longest = max(rt.replicated_jobs, key=len, default=names.NODE)
        return rt.max_name_length, (
            f"runtime {rt.name!r} runs a {longest!r} step and JobSet pod names must fit "
            "63 characters"
        )
    # Unknown runtime: the steps the spec needs are certain, the others possible.
    steps = [names.NODE]
    if spec.initializer and spec.initializer.dataset:
        steps.append(names.DATASET_INITIALIZER)
    if spec.initializer and spec.initializer.model:
        steps.append(names.MODEL_INITIALIZER)
    longest = max(steps, key=len)
    return names.max_name_length(steps), (
        f"this job runs a {longest!r} step and JobSet pod names must fit 63 characters"
    )


# --------------------------------------------------------------------------- trainer


def _quantity(value: int | float | str) -> int | str:
    if isinstance(value, float):
        return int(value) if value.is_integer() else repr(value)
    return value


def resources_per_node(resources: Mapping[str, int | float | str]) -> dict[str, Any]:
    """The SDK's resource shorthand as Kubernetes requests and limits."""
    out: dict[str, int | str] = {}
    for key, value in resources.items():
        low = key.lower()
        if low in _STANDARD_RESOURCES or low.startswith("mig-"):
            key = low
        key = _RESOURCE_ALIASES.get(key, key)
        if key.startswith("mig-"):
            key = MIG_PREFIX + key[len("mig-") :]
        out[key] = _quantity(value)
    return {"limits": dict(out), "requests": dict(out)}


def _env_list(env: Mapping[str, str | SecretKeyRef] | None) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for key, value in (env or {}).items():
        if isinstance(value, SecretKeyRef):
            ref: dict[str, Any] = {"name": value.name, "key": value.key}
            if value.optional is not None:
                ref["optional"] = value.optional
            items.append({"name": key, "valueFrom": {"secretKeyRef": ref}})
        else:
            items.append({"name": key, "value": value})
    return items


def _trainer(spec: TrainJobSpec, rt: RuntimeInfo, problems: list[FieldProblem]) -> dict[str, Any]:
    t = spec.trainer
    if t is None:
        return {}
    out: dict[str, Any] = {}
    if isinstance(t, BuiltinTrainer):
        if rt.framework != "torchtune" and rt.known:
            problems.append(
                FieldProblem(
                    "trainer",
                    f"BuiltinTrainer needs a TorchTune runtime; {shown(rt.name)} is a "
                    f"{rt.framework} runtime.",
                    "use e.g. runtime='torchtune-llama3.2-1b', or a CustomTrainer.",
                )
            )
        cfg = t.config
        if cfg.num_nodes:
            out["numNodes"] = cfg.num_nodes
        if cfg.resources_per_node:
            out["resourcesPerNode"] = resources_per_node(cfg.resources_per_node)
        out["command"] = list(TORCHTUNE_COMMAND)
        out["args"] = torchtune_args(cfg, spec)
        return out

    if rt.framework == "torchtune":
        problems.append(
            FieldProblem(
                "trainer",
                f"runtime {shown(rt.name)} runs TorchTune recipes, not custom code.",
                "use BuiltinTrainer(config=TorchTuneConfig(...)) or a runtime such as "
                "'torch-distributed'.",
            )
        )
    if t.image:
        out["image"] = t.image
    if t.num_nodes:
        out["numNodes"] = t.num_nodes
    if t.num_proc_per_node:
        out["numProcPerNode"] = t.num_proc_per_node
    if t.resources_per_node:
        out["resourcesPerNode"] = resources_per_node(t.resources_per_node)
    if isinstance(t, CustomTrainer):
        try:
            out["command"] = custom_trainer_command(t, rt)
        except ValueError as exc:
            problems.append(field_problem("trainer.func", str(exc)))
    env = _env_list(t.env)
    if env:
        out["env"] = env
    return out


def custom_trainer_command(trainer: CustomTrainer, rt: RuntimeInfo) -> list[str]:
    """The container command that runs a ``CustomTrainer`` function on ``rt``.

    The program is passed to ``bash -c`` as a positional argument and written to a file
    with ``printf '%s' "$1"``: bash never parses it, so ``$``, backticks and quotes in
    the user's code reach Python unchanged (the SDK's unquoted heredoc expands them).
    """
    name, source, ref = trainer.func.resolved()
    program = fn.program_for(name, source, trainer.func_args, import_ref=ref)
    if len(program.encode()) > _MAX_PROGRAM_BYTES:
        raise ValueError(
            f"the function and its arguments make a {len(program.encode()) // 1024} KiB program; "
            f"a container argument holds at most {_MAX_PROGRAM_BYTES // 1024} KiB. Fix: install "
            "the code in the image and reference it with embed=False, or pass large data by URI."
        )
    inner = "python" if rt.launcher == "mpirun" else rt.launcher
    folder = MPI_HOME if rt.launcher == "mpirun" else '"$(mktemp -d)"'
    script = _launch_script(name, inner, folder, len(trainer.packages_to_install or ()))
    # The program and pip's arguments are data after the script: bash never parses them.
    pip = (
        checks.pip_arguments(trainer.packages_to_install, trainer.pip_index_urls)
        if trainer.packages_to_install
        else []
    )
    command = ["bash", "-c", script, _SCRIPT_NAME, program, *pip]
    if rt.launcher == "mpirun":
        return ["mpirun", "--hostfile", "/etc/mpi/hostfile", *command]
    return command


#: ``$0`` of a function's launch script: ``bash -c SCRIPT kf-trainer PROGRAM [PIP …]``.
_SCRIPT_NAME = "kf-trainer"


def is_function_launch(command: list[str]) -> bool:
    """Whether ``command`` is a node command this builder made for a training function
    that installs nothing (``packages_to_install`` empty), launched without MPI: what a
    test bed can run on its own machine."""
    return (
        len(command) == 5
        and command[:2] == ["bash", "-c"]
        and command[3] == _SCRIPT_NAME
        and command[2].startswith("set -e\n")
    )


def _launch_script(func_name: str, launcher: str, folder: str, packages: int) -> str:
    """The ``bash -c`` script of a function's node. It holds no data of the user's:
    the program arrives as ``$1`` and pip's arguments (index options, ``--``, the
    requirements) as the rest, all passed on quoted, never expanded or parsed.
    ``packages`` is how many requirements end the arguments (a number, for the log)."""
    # The file name is for tracebacks only; an identifier checked to be plain ASCII
    # word characters, so that nothing in it is special to bash.
    stem = func_name if _ASCII_WORD.match(func_name) else "program"
    lines = [
        "set -e",
        "# The program arrives as $1 and is written verbatim: nothing in it is expanded.",
        f"prog={folder}/kf_trainer_{stem}.py",
        'printf \'%s\' "$1" > "$prog"',
        "shift",
    ]
    if packages:
        lines += [
            "# Install the requested packages: per user first (read-only site-packages),",
            "# then system-wide (virtual environments refuse --user). The arguments end",
            "# pip's options with --, so every requirement is read as one.",
            'log="$(mktemp)"',
            "export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_BREAK_SYSTEM_PACKAGES=1",
            "python -m pip --version >/dev/null 2>&1 || python -m ensurepip --user >/dev/null 2>&1 "
            "|| python -m ensurepip >/dev/null 2>&1 || true",
            'if python -m pip install --quiet --no-warn-script-location --user "$@" >"$log" 2>&1 '
            '|| python -m pip install --quiet --no-warn-script-location "$@" >>"$log" 2>&1; then',
            f'  echo "kf-trainer: installed ${{*: -{int(packages)}}}"',
            "else",
            '  echo "kf-trainer: pip install failed" >&2; cat "$log" >&2; exit 1',
            "fi",
        ]
    lines.append(f'exec ${{KF_TRAINER_LAUNCHER:-{launcher}}} "$prog"')
    return "\n".join(lines) + "\n"


def torchtune_args(cfg: TorchTuneConfig, spec: TrainJobSpec) -> list[str]:
    """``key=value`` overrides of the runtime's TorchTune recipe config."""
    args: list[str] = []
    if cfg.dtype:
        args.append(f"dtype={cfg.dtype.value}")
    if cfg.batch_size:
        args.append(f"batch_size={cfg.batch_size}")
    if cfg.epochs:
        args.append(f"epochs={cfg.epochs}")
    if cfg.loss:
        args.append(f"loss={cfg.loss.value}")
    dataset = spec.initializer.dataset if spec.initializer else None
    if isinstance(dataset, HuggingFaceDatasetInitializer):
        # hf://org/name/sub/file.json → a file inside the downloaded data set.
        parts = dataset.storage_uri[len("hf://") :].strip("/").split("/")
        rel = "/".join(parts[2:]) if len(parts) > 2 else ""
        if rel and "." in rel.rsplit("/", 1)[-1]:
            args.append(f"dataset.data_files={DATASET_PATH}/{rel}")
        else:
            args.append(f"dataset.data_dir={DATASET_PATH}/{rel}".rstrip("/"))
    lora = cfg.peft_config
    if lora is not None:
        for key in (
            "apply_lora_to_mlp",
            "apply_lora_to_output",
            "lora_rank",
            "lora_alpha",
            "lora_dropout",
            "quantize_base",
            "use_dora",
        ):
            value = getattr(lora, key)
            if value is not None:
                args.append(f"model.{key}={value}")
        if lora.lora_attn_modules:
            args.append(f"model.lora_attn_modules=[{','.join(lora.lora_attn_modules)}]")
    pre = cfg.dataset_preprocess_config
    if pre is not None:
        args.append("dataset=torchtune.datasets.instruct_dataset")
        if pre.source:
            args.append(f"dataset.source={pre.source.value}")
        if pre.split:
            args.append(f"dataset.split={pre.split}")
        if pre.train_on_input is not None:
            args.append(f"dataset.train_on_input={pre.train_on_input}")
        if pre.new_system_prompt:
            args.append(f"dataset.new_system_prompt={pre.new_system_prompt}")
        if pre.column_map:
            mapping = ",".join(f"{k}:{v}" for k, v in sorted(pre.column_map.items()))
            args.append(f"dataset.column_map={{{mapping}}}")
    return args


# ----------------------------------------------------------------------- initializers


def _init_env(
    pairs: Iterable[tuple[str, Any]], extra: Mapping[str, str] | None
) -> list[dict[str, Any]]:
    env: dict[str, str] = {}
    for key, value in pairs:
        if value is None:
            continue
        env[key] = ",".join(str(v) for v in value) if isinstance(value, list) else str(value)
    env.update(extra or {})
    return [{"name": k, "value": v} for k, v in env.items()]


def _initializer(
    spec: TrainJobSpec, rt: RuntimeInfo, problems: list[FieldProblem]
) -> dict[str, Any]:
    init = spec.initializer
    if init is None:
        return {}
    out: dict[str, Any] = {}
    for key, step, item in (
        ("dataset", names.DATASET_INITIALIZER, init.dataset),
        ("model", names.MODEL_INITIALIZER, init.model),
    ):
        if item is None:
            continue
        if rt.known and step not in rt.replicated_jobs:
            problems.append(
                FieldProblem(
                    f"initializer.{key}",
                    f"runtime {shown(rt.name)} has no {shown(step)} step, so the Trainer would "
                    "ignore it.",
                    "use a runtime with that step (e.g. 'torch-distributed-with-cache' or a "
                    "torchtune runtime), or fetch the data inside the training function.",
                )
            )
        pairs: list[tuple[str, Any]] = []
        if isinstance(item, (HuggingFaceDatasetInitializer, HuggingFaceModelInitializer)):
            pairs = [("IGNORE_PATTERNS", item.ignore_patterns)]
        elif isinstance(item, (S3DatasetInitializer, S3ModelInitializer)):
            pairs = [
                ("IGNORE_PATTERNS", item.ignore_patterns),
                ("ENDPOINT", item.endpoint),
                ("REGION", item.region),
                ("ROLE_ARN", item.role_arn),
            ]
        elif isinstance(item, DataCacheInitializer):
            pairs = [
                # The cache runs one head plus the data nodes.
                ("CLUSTER_SIZE", item.num_data_nodes + 1),
                ("METADATA_LOC", item.metadata_loc),
                ("HEAD_CPU", item.head_cpu),
                ("HEAD_MEM", item.head_mem),
                ("WORKER_CPU", item.worker_cpu),
                ("WORKER_MEM", item.worker_mem),
                ("IAM_ROLE", item.iam_role),
            ]
        entry: dict[str, Any] = {"storageUri": item.storage_uri}
        env = _init_env(pairs, item.env)
        if env:
            entry["env"] = env
        if item.secret_ref:
            entry["secretRef"] = {"name": item.secret_ref}
        out[key] = entry
    return out


# ---------------------------------------------------------------------- runtime patch


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _to_api(value: Any) -> Any:
    """Our snake_case patch models → the API's camelCase; free-form Kubernetes dicts
    inside them are already in API form and pass through."""
    from pydantic import BaseModel

    if isinstance(value, BaseModel):
        out: dict[str, Any] = {}
        for key in type(value).model_fields:
            if key == "type":
                continue
            item = getattr(value, key)
            if item is None:
                continue
            converted = _to_api(item)
            if converted in ({}, []):
                continue
            out[_camel(key)] = converted
        return out
    if isinstance(value, list):
        return [_to_api(v) for v in value]
    return value


def _runtime_patch(
    opt: RuntimePatch, where: str, rt: RuntimeInfo, problems: list[FieldProblem]
) -> dict[str, Any]:
    spec = opt.training_runtime_spec
    rjobs = (
        (spec.template.spec.replicated_jobs or [])
        if spec and spec.template and spec.template.spec
        else []
    )
    for j, rjob in enumerate(rjobs):
        base = f"{where}.training_runtime_spec.template.spec.replicated_jobs[{j}]"
        if rt.known and rjob.name not in rt.replicated_jobs:
            problems.append(
                FieldProblem(
                    f"{base}.name",
                    f"runtime {shown(rt.name)} has no replicated job {shown(rjob.name)} "
                    f"(it has {', '.join(rt.replicated_jobs)}).",
                    "patch one of those.",
                )
            )
        pod = (
            rjob.template.spec.template.spec
            if rjob.template and rjob.template.spec and rjob.template.spec.template
            else None
        )
        if pod is None:
            continue
        for group in ("containers", "init_containers"):
            for k, container in enumerate(getattr(pod, group) or []):
                cwhere = f"{base}.template.spec.template.spec.{group}[{k}]"
                env_names = [str(e.get("name")) for e in container.env or []]
                reserved = [n for n in env_names if n.startswith("PET_")]
                if group == "containers" and container.name == names.NODE and reserved:
                    problems.append(
                        FieldProblem(
                            f"{cwhere}.env",
                            f"{', '.join(reserved)}: PET_* variables are reserved for the Trainer "
                            "on the node container.",
                            "drop them; num_nodes and num_proc_per_node set them.",
                        )
                    )
                elif (
                    group == "containers"
                    and container.name in _TRAINER_OWNED_CONTAINERS
                    and env_names
                ):
                    owner = (
                        "the trainer's `env`"
                        if container.name == names.NODE
                        else f"the {container.name.split('-')[0]} initializer's `env`"
                    )
                    problems.append(
                        FieldProblem(
                            f"{cwhere}.env",
                            f"the Trainer sets the env of the {shown(container.name)} container "
                            "from the TrainJob and rejects runtime patches of it.",
                            f"set these variables through {owner}.",
                        )
                    )
    return {"manager": opt.manager, **({"trainingRuntimeSpec": _to_api(spec)} if spec else {})}
