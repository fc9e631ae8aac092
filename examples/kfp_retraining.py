"""Daily retraining as a Kubeflow Pipelines v2 pipeline: prepare the day's data → train
it as a Kubeflow Trainer TrainJob → evaluate the candidate → promote it only when it
beats the promoted model (``dsl.If`` / ``dsl.Else``).

On this machine (``kfp.local`` runs each task as a subprocess; the TrainJob runs as
local processes; no cluster)::

    uv run --frozen python examples/kfp_retraining.py              # today's data
    uv run --frozen python examples/kfp_retraining.py --day 12     # another day

On a cluster, the same pipeline with other configuration:

* **where**: the component argument ``backend_config`` (a pipeline parameter here):
  ``{}`` uses the launcher pod's service account (the run's ``service_account``, with
  the RBAC of ``src/kf_trainer_kfp/README.md``), ``{"namespace": "team-a"}`` picks a
  namespace; credentials never go in parameters (mount them from a Secret);
* **what**: the profile ``cluster`` (see ``retraining_jobs.CLUSTER``: runtime
  ``torch-distributed``, ``num_nodes=2``, ``resources_per_node={"gpu": 4, ...}``, the
  PVC ``retraining-data`` at ``/mnt/shared/retraining`` in the training pods and in the
  prepare/evaluate/promote pods), compiled in;
* **images**: the components import ``retraining_ml``, so they run in an image that
  holds it (``--image``; ``docs/kfp.md`` has its Dockerfile).

Compile it, or make it a recurring run (daily at 03:00 UTC)::

    uv run --frozen python examples/kfp_retraining.py --compile retraining.yaml \\
        --profile cluster --image registry.example.com/kf-retraining:0.1
    uv run --frozen python examples/kfp_retraining.py --schedule \\
        --host https://kubeflow.example.com/pipeline --profile cluster \\
        --image registry.example.com/kf-retraining:0.1
"""

# No `from __future__ import annotations`: KFP reads component annotations as objects.
import argparse
import contextlib
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kfp import dsl
from kfp.dsl import Input, Metrics, Model, Output

from kf_trainer_kfp import ComponentImage, trainjob_component
from retraining_jobs import JobProfile
from retraining_jobs import profile as job_profile
from retraining_ml import summary, train

HERE = Path(__file__).resolve().parent
#: Where files go on this machine when the profile names no shared directory.
LOCAL_DIR = ".kf-trainer/kfp"
#: The recurring run's schedule (KFP cron: seconds first).
CRON = "0 0 3 * * *"


# ----------------------------------------------------------- the pipeline's own steps
# Lightweight components: only each function's source reaches its pod (its annotations
# included, hence the inline NamedTuples), so the imports are inside, and
# ``retraining_ml`` must be importable where they run (PYTHONPATH here, the component
# image on a cluster).


def prepare(shared_dir: str, day: int) -> NamedTuple(
    "Prepared", [("data_dir", str), ("model_dir", str), ("registry", str), ("day", int)]
):
    """Write the day's train and test sets (``day`` < 0: today's, the day a recurring
    run runs); return where everything goes."""
    from collections import namedtuple

    from retraining_ml import day_of, layout, prepare_data

    if day < 0:
        day = day_of()
    paths = layout(shared_dir, day)
    print(prepare_data(paths["data_dir"], day))
    Prepared = namedtuple("Prepared", ["data_dir", "model_dir", "registry", "day"])
    return Prepared(paths["data_dir"], paths["model_dir"], paths["registry"], day)


def evaluate_candidate(
    model: Input[Model], data_dir: str, registry: str, scores: Output[Metrics]
) -> NamedTuple("Evaluation", [("accuracy", float), ("loss", float), ("decision", str)]):
    """The candidate's test metrics (also as the run's Metrics), compared with the
    promoted model's accuracy on the same (today's) test set."""
    from collections import namedtuple

    from retraining_ml import current_accuracy, evaluate, promoted_note

    metrics = evaluate(model.uri, data_dir)
    baseline = current_accuracy(registry, data_dir)
    print(f"candidate {metrics}, {promoted_note(registry, baseline)}")
    for key, value in {**metrics, "promoted_accuracy": baseline}.items():
        scores.log_metric(key, value)
    decision = "promote" if metrics["accuracy"] > baseline else "keep"
    Evaluation = namedtuple("Evaluation", ["accuracy", "loss", "decision"])
    return Evaluation(metrics["accuracy"], metrics["loss"], decision)


def promote_model(
    model: Input[Model], registry: str, accuracy: float, loss: float, day: int
) -> str:
    """Copy the candidate into the registry, with its metrics."""
    import json

    from retraining_ml import promote

    done = promote(model.uri, {"accuracy": accuracy, "loss": loss, "day": day}, registry)
    return json.dumps(done, sort_keys=True)


def keep_promoted(accuracy: float) -> str:
    """Say why nothing was promoted."""
    text = f"keeping the promoted model: the candidate's accuracy {accuracy} is not better"
    print(text)
    return text


# ------------------------------------------------------------------------ the pipeline


def build_pipeline(job: JobProfile | None = None, image: str | None = None) -> Any:
    """The pipeline for ``job`` (default: the local profile). ``image`` holds
    ``kf-trainer-suite``, ``kfp`` and ``retraining_ml``; without it, every task runs
    with this interpreter (``kfp.local.SubprocessRunner(use_venv=False)``)."""
    job = job or job_profile("local")
    if image:
        plain = {"base_image": image, "install_kfp_package": False}
        launcher = ComponentImage.prebuilt(image)
    else:
        plain = {"base_image": "python:3.11", "install_kfp_package": False}
        launcher = ComponentImage.current_environment()
    prepare_op = dsl.component(**plain)(prepare)
    evaluate_op = dsl.component(**plain)(evaluate_candidate)
    promote_op = dsl.component(**plain)(promote_model)
    keep_op = dsl.component(**plain)(keep_promoted)
    # The training function as a TrainJob component: its parameters (data_dir,
    # model_dir, lr, epochs) are the component's inputs, with backend_config & co.
    train_op = trainjob_component(
        train,
        runtime=job.runtime,
        options=job.job_options(),
        timeout_seconds=4 * 3600,
        component_image=launcher,
        **job.trainer_settings(),
    )

    def shared(task: Any) -> Any:
        # The pipeline's own pods see the files at the path the training pods do.
        if job.volume_claim and job.shared_dir:
            from kfp import kubernetes

            kubernetes.mount_pvc(task, pvc_name=job.volume_claim, mount_path=job.shared_dir)
        return task

    @dsl.pipeline(name="kf-retraining", description="Retrain daily; promote when better.")
    def retraining(
        day: int = -1,
        shared_dir: str = job.root(LOCAL_DIR),
        backend_config: dict = {},  # noqa: B006 - KFP takes literal defaults
    ) -> str:
        data = shared(prepare_op(shared_dir=shared_dir, day=day))
        trained = train_op(
            data_dir=data.outputs["data_dir"],
            model_dir=data.outputs["model_dir"],
            backend_config=backend_config,
        )
        scored = shared(
            evaluate_op(
                model=trained.outputs["model"],
                data_dir=data.outputs["data_dir"],
                registry=data.outputs["registry"],
            )
        )
        with dsl.If(scored.outputs["decision"] == "promote", name="better"):
            shared(
                promote_op(
                    model=trained.outputs["model"],
                    registry=data.outputs["registry"],
                    accuracy=scored.outputs["accuracy"],
                    loss=scored.outputs["loss"],
                    day=data.outputs["day"],
                )
            )
        with dsl.Else(name="not-better"):
            keep_op(accuracy=scored.outputs["accuracy"])
        return scored.outputs["decision"]

    return retraining


def run_locally(
    day: int | None = None,
    shared_dir: str | None = None,
    job: JobProfile | None = None,
    backend_config: dict[str, Any] | None = None,
) -> str:
    """Run the pipeline once with ``kfp.local``; return the decision (``promote`` or
    ``keep``). The TrainJob runs on the local backend unless ``backend_config`` says
    otherwise (e.g. ``{"kubeconfig": "~/.kube/config"}``: a cluster)."""
    from kfp import local

    job = job or job_profile("local")
    root = Path(shared_dir or job.root(LOCAL_DIR)).resolve()
    # The components import retraining_ml from here (a cluster's image holds it).
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if str(HERE) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), *paths) if p)
    local.init(
        runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(root / "pipeline-root")
    )
    with executor_logs_hidden():
        run = build_pipeline(job)(
            day=-1 if day is None else day,
            shared_dir=str(root),
            backend_config=backend_config
            or {"backend": "local", "state_dir": str(root / "trainjobs")},
        )
    return str(run.output)


class ExecutorLogFilter:
    """A stdout that drops the KFP executor's own INFO lines (``[KFP Executor ...
    INFO]: Looking for component ...``, ``Got executor_input:`` and the JSON that
    follows it, ``Wrote executor output file ...``): ``kfp.local`` streams each task's
    subprocess through the parent's stdout, and those lines buried what the task
    printed. Everything else passes: the task's own lines, KFP's task summaries and
    outputs, and the executor's warnings, errors and tracebacks."""

    _EXECUTOR_INFO = re.compile(r"^(\s*)\[KFP Executor [^\]]* INFO\]: (.*)$")

    def __init__(self, out: Any) -> None:
        self.out = out
        self._pending = ""
        #: The indentation of a skipped ``executor_input`` JSON document, while in it.
        self._json: str | None = None
        self._json_opened = False

    def write(self, text: str) -> int:
        self._pending += text
        while "\n" in self._pending:
            line, self._pending = self._pending.split("\n", 1)
            self._line(line)
        return len(text)

    def _line(self, line: str) -> None:
        if self._json is not None:
            if not self._json_opened and line == self._json + "{":
                self._json_opened = True
                return
            if self._json_opened:
                if line == self._json + "}":
                    self._json = None
                return
            self._json = None  # not the JSON after all: show the line
        found = self._EXECUTOR_INFO.match(line)
        if found is not None:
            if found.group(2).startswith("Got executor_input:"):
                self._json, self._json_opened = found.group(1), False
            return
        self.out.write(line + "\n")

    def flush(self) -> None:
        if self._pending:
            self.out.write(self._pending)
            self._pending = ""
        self.out.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.out, name)  # isatty, encoding, fileno: the real stdout's


@contextlib.contextmanager
def executor_logs_hidden() -> Iterator[None]:
    """Run a ``kfp.local`` pipeline with :class:`ExecutorLogFilter` on stdout."""
    shown = ExecutorLogFilter(sys.stdout)
    with contextlib.redirect_stdout(shown):
        try:
            yield
        finally:
            shown.flush()


def local_summary(decision: str, job: JobProfile, shared_dir: str | None = None) -> str:
    """The closing lines of a local run (after KFP's own logging): promoted or not, the
    promoted model and its metrics, the TrainJob and how to look at it."""
    from kf_trainer_core.client import TrainerClient
    from kf_trainer_core.config import LocalConfig

    root = Path(shared_dir or job.root(LOCAL_DIR)).resolve()
    state_dir = str(root / "trainjobs")
    with TrainerClient(LocalConfig(state_dir=state_dir)) as client:
        jobs = client.list_jobs()
    stamps = [(str(j.creation_timestamp), j.name) for j in jobs]
    name = max(stamps)[1] if stamps else None
    return summary(decision == "promote", str(root / "registry"), name, state_dir)


def schedule(
    client: Any,
    package: str,
    *,
    params: dict[str, Any] | None = None,
    service_account: str = "trainer-launcher",
) -> Any:
    """Create the daily recurring run of a compiled pipeline with ``client`` (a
    ``kfp.Client``)."""
    experiment = client.create_experiment("kf-retraining")
    return client.create_recurring_run(
        experiment_id=experiment.experiment_id,
        job_name="kf-retraining-daily",
        description="Retrain on the day's data; promote the model when it is better.",
        cron_expression=CRON,
        no_catchup=True,
        max_concurrency=1,
        pipeline_package_path=package,
        params=params or {},
        service_account=service_account,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the pipeline here, compile or schedule it.")
    parser.add_argument("--day", type=int, help="which day's data (default: today)")
    parser.add_argument("--profile", default="local", help="local, cluster, or JSON")
    parser.add_argument("--image", help="the components' image (cluster)")
    parser.add_argument("--compile", metavar="FILE", help="write the pipeline YAML")
    parser.add_argument("--schedule", action="store_true", help="create a recurring run")
    parser.add_argument("--host", help="the KFP API endpoint (with --schedule)")
    parser.add_argument("--backend-config", default="{}", help="JSON (with --schedule)")
    args = parser.parse_args(argv)
    job = job_profile(args.profile)
    if args.schedule and not (args.host or os.environ.get("KF_PIPELINES_ENDPOINT")):
        parser.error(
            "--schedule needs the KFP API endpoint: --host URL (or $KF_PIPELINES_ENDPOINT), "
            "e.g. --host http://localhost:8888 after "
            "`kubectl port-forward -n kubeflow svc/ml-pipeline-ui 8888:80`."
        )
    if not (args.compile or args.schedule):
        decision = run_locally(args.day, job=job)
        print(f"decision: {decision}")
        print(local_summary(decision, job))
        return 0

    from kfp import compiler

    package = args.compile or str(Path(tempfile.mkdtemp()) / "kf-retraining.yaml")
    compiler.Compiler().compile(build_pipeline(job, args.image), package)
    print(f"compiled {package}")
    if args.schedule:
        import kfp

        try:
            made = schedule(
                kfp.Client(host=args.host),
                package,
                params={"backend_config": json.loads(args.backend_config)},
            )
        except Exception as exc:  # the API's own errors are long; say what failed and why
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            print(
                f"cannot create the recurring run at {args.host or '$KF_PIPELINES_ENDPOINT'}: "
                f"{first}. Fix: check --host and that the KFP API answers there.",
                file=sys.stderr,
            )
            return 1
        print(f"recurring run {made.recurring_run_id}: {CRON}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
