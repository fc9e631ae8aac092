"""Parts of the Prefect integration that need no Prefect server: the credentials block,
the artifact builders, identities, what an interruption means for a job, the
decorator's checks, and cheap imports."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, ClassVar

import pytest
from prefect.blocks.core import Block
from prefect.exceptions import TerminationSignal
from prefect_support import spec
from pydantic import ValidationError

from kf_trainer_core.base.timeutil import duration_text
from kf_trainer_core.cluster.outputs import JobOutputs
from kf_trainer_core.cluster.status import Failure, JobState, Progress, Step, TrainJob
from kf_trainer_core.config import KubernetesConfig, LocalConfig
from kf_trainer_core.errors import (
    SpecError,
    TrainJobCreationFailedError,
    TrainJobDeletedError,
    TrainJobFailedError,
    TrainJobTimeoutError,
)
from kf_trainer_core.spec import Labels, Name
from kf_trainer_prefect import KubeflowTrainerCredentials, trainjob_task
from kf_trainer_prefect._engine import (
    FLOW_RUN_LABEL,
    RunInfo,
    TaskRunnerShutdown,
    check_action,
    decision,
    identity_for,
    labelled,
)
from kf_trainer_prefect.artifacts import (
    job_summary,
    outputs_summary,
    progress_description,
    steps_table,
)
from kf_trainer_prefect.credentials import credentials_from

SECRET = "tok-VERY-SECRET-4242"
KUBECONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [{"name": "c", "cluster": {"server": "https://k8s.example:6443"}}],
    "users": [{"name": "u", "user": {"token": SECRET}}],
    "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u", "namespace": "ml"}}],
    "current-context": "ctx",
}


# ------------------------------------------------------------------- credentials


def test_block_maps_to_core_configs() -> None:
    kube = KubeflowTrainerCredentials(host="https://k8s.example", token=SECRET, namespace="ml")
    config = kube.backend_config()
    assert isinstance(config, KubernetesConfig)
    assert config.host == "https://k8s.example"
    assert config.token is not None
    assert config.token.get_secret_value() == SECRET
    assert config.resolve_namespace() == "ml"
    local = KubeflowTrainerCredentials(backend="local", state_dir="/tmp/x", use_venv=True)
    assert isinstance(local.backend_config(), LocalConfig)
    assert local.backend_config().state_dir == "/tmp/x"
    assert KubeflowTrainerCredentials().backend_config() == KubernetesConfig(
        watch_timeout=60, poll_interval=2.0, request_timeout=30.0
    )


@pytest.mark.parametrize(
    ("fields", "names"),
    [
        ({"token": SECRET}, ["token needs a host", "Fix: set `host`"]),
        ({"backend": "local", "token": SECRET}, ["token applies only", "Fix: clear it"]),
        ({"state_dir": "/x"}, ["state_dir applies only to backend 'local'"]),
        ({"in_cluster": True, "host": "https://h"}, ["in_cluster=True", "Fix:"]),
        (
            {"kubeconfig_path": "/x", "token": SECRET},
            ["kubeconfig_path (did you mean kubeconfig?)"],
        ),
        ({"dashboard_url": "https://d/{job}"}, ["unknown placeholders ['job']", "{namespace}"]),
        ({"dashboard_url": "d/{name}"}, ["not an http(s) URL"]),
        ({"watch_timeout": 1, "token": SECRET, "host": "https://h"}, ["watch_timeout"]),
    ],
)
def test_bad_credentials_name_field_and_fix_without_secrets(
    fields: dict[str, Any], names: list[str]
) -> None:
    with pytest.raises(ValidationError) as info:
        KubeflowTrainerCredentials(**fields)
    text = str(info.value)
    for name in names:
        assert name in text
    assert SECRET not in text


def test_secrets_stay_out_of_reprs_and_dumps() -> None:
    block = KubeflowTrainerCredentials(
        host="https://k8s.example", token=SECRET, ca_cert_data=SECRET + "-ca"
    )
    inline = KubeflowTrainerCredentials(kubeconfig_content=json.dumps(KUBECONFIG))
    for shown in (
        repr(block),
        str(block),
        repr(inline),
        block.model_dump_json(),
        json.dumps(block.model_dump(mode="json")),
        repr(block.backend_config()),
        repr(block.get_client()),
    ):
        assert SECRET not in shown


class KubernetesClusterConfig(Block):
    """A stand-in with prefect-kubernetes' fields (prefect-kubernetes is not installed
    here; the integration must not need it)."""

    _block_type_slug: ClassVar[str | None] = "kf-test-kubernetes-cluster-config"
    config: dict[str, Any]
    context_name: str


class KubernetesCredentials(Block):
    _block_type_slug: ClassVar[str | None] = "kf-test-kubernetes-credentials"
    cluster_config: KubernetesClusterConfig | None = None


def test_prefect_kubernetes_credentials_are_accepted() -> None:
    theirs = KubernetesCredentials(
        cluster_config=KubernetesClusterConfig(config=KUBECONFIG, context_name="ctx")
    )
    ours = credentials_from(theirs)
    config = ours.backend_config()
    assert isinstance(config, KubernetesConfig)
    assert config.context == "ctx"
    assert config.kubeconfig_dict() == KUBECONFIG
    assert config.resolve_namespace() == "ml"
    assert SECRET not in repr(ours)
    # Their cluster config on its own, and credentials without one (discovery).
    assert credentials_from(theirs.cluster_config).backend_config() == config
    assert credentials_from(KubernetesCredentials()).backend_config() == KubernetesConfig(
        watch_timeout=60, poll_interval=2.0, request_timeout=30.0
    )


def test_other_credential_forms() -> None:
    assert credentials_from(None).backend == "kubernetes"
    assert credentials_from(LocalConfig(state_dir="/s")).backend_config() == LocalConfig(
        state_dir="/s"
    )
    assert credentials_from({"backend": "local"}).backend == "local"
    kube = KubernetesConfig(host="https://h", token=SECRET, namespace="a")
    assert credentials_from(kube).backend_config() == kube
    with pytest.raises(TypeError, match="KubeflowTrainerCredentials block or its saved name"):
        credentials_from(42)  # type: ignore[arg-type]


def test_dashboard_link() -> None:
    block = KubeflowTrainerCredentials(dashboard_url="https://ui.example/jobs/{namespace}/{name}")
    assert block.dashboard_link("ml", "job-1") == "https://ui.example/jobs/ml/job-1"
    assert KubeflowTrainerCredentials().dashboard_link("ml", "job-1") is None


# --------------------------------------------------------------------- artifacts


def _job(status: JobState = JobState.COMPLETE, **extra: Any) -> TrainJob:
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    return TrainJob(
        name="train-abc",
        namespace="ml",
        runtime="torch-distributed",
        status=status,
        steps=[
            Step(name="node-0", status="Failed", pod_name="train-abc-node-0-0-x", exit_code=3),
            Step(
                name="node-1",
                status="Running",
                pod_name="train-abc-node-0-1-y",
                device="gpu",
                device_count="4",
            ),
        ],
        creation_timestamp=start,
        completion_timestamp=start + timedelta(seconds=3725),
        progress=Progress(percentage=40, estimated_remaining_seconds=90, metrics={"loss": "0.5"}),
        **extra,
    )


def test_progress_and_duration_text() -> None:
    assert duration_text(3725) == "1h 02m 05s"
    assert duration_text(65) == "1m 05s"
    assert duration_text(None) == "unknown"
    text = progress_description(_job(JobState.RUNNING))
    assert "ml/train-abc" in text
    assert "40%" in text
    assert "1m 30s left" in text
    assert "loss=0.5" in text


def test_table_rows() -> None:
    rows = steps_table(_job().steps, {"loss": "0.5", "acc": "0.9"})
    assert [(r["kind"], r["name"]) for r in rows] == [
        ("step", "node-0"),
        ("step", "node-1"),
        ("metric", "acc"),
        ("metric", "loss"),
    ]
    assert rows[0]["exit_code"] == 3
    assert rows[1]["device"] == "gpu x 4"
    assert rows[0]["device"] == ""
    assert {len(r) for r in rows} == {8}  # one set of columns


def test_summaries() -> None:
    failure = Failure(
        reason="Error",
        message="exit `1`",
        step="node-0",
        pod="train-abc-node-0-0-x",
        exit_code=3,
        log_tail=[f"line {i}" for i in range(50)] + ["```"],
    )
    text = job_summary(_job(JobState.FAILED), failure=failure, note="The task stopped.")
    for part in ("train-abc", "ml", "torch-distributed", "1h 02m 05s", "Failed", "Error"):
        assert part in text
    assert "exit code 3" in text
    assert "line 49" in text
    assert "line 10" not in text  # only the last lines
    assert "The task stopped." in text
    assert "````text" in text  # a fence longer than the backticks in the log
    done = JobOutputs(
        name="train-abc",
        namespace="ml",
        status=JobState.COMPLETE,
        runtime="torch-distributed",
        result={"loss": 0.1},
        metrics={"loss": "0.1"},
        duration_seconds=12,
    )
    text = outputs_summary(done, link="https://ui/ml/train-abc")
    assert '{"loss": 0.1}' in text
    assert "[train-abc](https://ui/ml/train-abc)" in text
    assert "12s" in text


# -------------------------------------------------------------------- identities


def _run(**kw: Any) -> RunInfo:
    import logging

    base: dict[str, Any] = {
        "flow_run_id": "f-1",
        "task_run_id": "t-1",
        "task_name": "run-trainjob",
        "run_count": 1,
        "retries": 0,
        "logger": logging.getLogger("t"),
    }
    return RunInfo(**{**base, **kw})


def test_identity_is_flow_run_task_and_spec() -> None:
    a, b = spec("success"), spec("fail")
    ident = identity_for(a, _run(), None, None)
    assert ident is not None
    assert ident[:3] == ("prefect", "f-1", "run-trainjob")
    # Another task run of the same task (a retry, a re-run after a crash): same identity.
    assert identity_for(a, _run(task_run_id="t-2", run_count=2), None, None) == ident
    assert identity_for(b, _run(), None, None) != ident
    assert identity_for(a, _run(task_name="other"), None, None) != ident
    assert identity_for(a, _run(flow_run_id="f-2"), None, None) != ident
    # Explicit identities and names win; outside a flow the task run is the scope.
    assert identity_for(a, _run(), ("mine",), None) == ("mine",)
    assert identity_for(a, _run(), None, "fixed-name") is None
    assert identity_for(a.with_options(Name("fixed")), _run(), None, None) is None
    assert identity_for(a, _run(flow_run_id=None), None, None)[:3] == ("prefect", "task-run", "t-1")  # type: ignore[index]


def test_jobs_carry_their_flow_run() -> None:
    tagged = labelled(spec(None, Labels({"team": "ml"})), _run())
    labels: dict[str, str] = {}
    for opt in tagged.options:
        if isinstance(opt, Labels):
            labels.update(opt.labels)
    assert labels == {"team": "ml", FLOW_RUN_LABEL: "f-1"}
    assert labelled(spec(None), _run(flow_run_id=None)) == spec(None)


# ------------------------------------------------------------------ interruptions


def _failed() -> TrainJobFailedError:
    return TrainJobFailedError(None, Failure(reason="Error"))


@pytest.mark.parametrize(
    ("exc", "run", "cancelling", "expected"),
    [
        (TimeoutError("task timeout"), _run(), False, "cancel"),
        (TrainJobTimeoutError("no start"), _run(retries=3), False, "cancel"),
        (asyncio.CancelledError(), _run(), False, "cancel"),
        (KeyboardInterrupt(), _run(), False, "cancel"),
        (TerminationSignal(15), _run(), True, "cancel"),
        (TerminationSignal(15), _run(), False, "keep"),  # a crash: a re-run reattaches
        (TaskRunnerShutdown(), _run(), True, "cancel"),
        (TaskRunnerShutdown(), _run(), False, "keep"),
        (TrainJobCreationFailedError(None, Failure()), _run(), False, "cancel"),
        (_failed(), _run(), False, "keep"),  # ended: nothing to stop
        (TrainJobDeletedError("gone"), _run(), False, "keep"),
        (ConnectionError("api down"), _run(retries=2, run_count=1), False, "keep"),  # retried
        (ConnectionError("api down"), _run(retries=2, run_count=3), False, "cancel"),  # last
        (SystemExit(1), _run(), False, "keep"),
    ],
)
def test_what_an_interruption_means(
    exc: BaseException, run: RunInfo, cancelling: bool, expected: str
) -> None:
    async def asked() -> bool:
        return cancelling

    # The decision the task's hold on its job takes (a signal: the flow run's state).
    assert asyncio.run(decision(run, asked)(exc)) == expected


def test_cancel_actions_are_checked() -> None:
    assert check_action("suspend") == "suspend"
    with pytest.raises(ValueError, match=r"'delete'.*'suspend'.*'keep'"):
        check_action("destroy")


# --------------------------------------------------------------------- decorator


def test_decorator_refuses_bad_functions_when_decorating() -> None:
    factor = 3

    def closure(x: int = 1) -> int:
        return x * factor

    with pytest.raises(SpecError, match=r"factor.*func_args"):
        trainjob_task(closure)

    def positional(x: int, /) -> int:
        return x

    with pytest.raises(SpecError, match="positionally only"):
        trainjob_task(positional)

    with pytest.raises(SpecError, match="num_nodes"):
        trainjob_task(num_nodes=0)(_plain)

    with pytest.raises(ValueError, match="on_cancel"):
        trainjob_task(on_cancel="explode")  # type: ignore[call-overload]


def _plain(lr: float = 0.1, **extra: Any) -> float:
    return lr


def test_decorated_task_looks_like_the_function() -> None:
    task = trainjob_task(retries=2, tags=["gpu"])(_plain)
    import inspect

    assert task.name == "_plain"
    assert task.retries == 2
    assert task.tags == {"gpu"}
    assert list(inspect.signature(task.fn).parameters) == ["lr", "extra"]
    assert not task.isasync
    from kf_trainer_prefect import atrainjob_task

    assert atrainjob_task(_plain).isasync


def test_decorated_call_arguments_become_func_args() -> None:
    from kf_trainer_core.tasks import FunctionTemplate
    from kf_trainer_prefect.decorators import _Split

    split = _Split({"num_nodes": 2, "resources_per_node": {"cpu": 2}})
    template = FunctionTemplate(
        _plain, split.runtime, split.trainer, split.initializer, split.options
    )
    built = template.spec_for((0.5,), {"momentum": 0.9})
    assert built.trainer is not None
    assert built.trainer.func_args == {"lr": 0.5, "momentum": 0.9}  # type: ignore[union-attr]
    assert built.trainer.num_nodes == 2
    with pytest.raises(SpecError, match="func_args"):
        template.spec_for((), {"lr": object()})
    with pytest.raises(SpecError, match="func_args"):
        template.spec_for((1, 2), {})


# ------------------------------------------------------------------------ imports


def test_importing_the_collection_imports_no_kubernetes_client() -> None:
    code = (
        "import sys, kf_trainer_prefect, kf_trainer_prefect.tasks, kf_trainer_prefect.flows, "
        "kf_trainer_prefect.decorators, kf_trainer_prefect.credentials, "
        "kf_trainer_prefect.artifacts\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('kubernetes', 'kubernetes_asyncio'))\n"
        "print(bad)\n"
        "raise SystemExit(1 if bad else 0)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_tasks_module_adds_only_prefects_task_machinery() -> None:
    """A flow file imports Prefect's ``task`` and then our tasks: they add none of the
    rest of the package (the flows build Prefect flows at import), no spec or
    configuration model, no engine and no Kubernetes client; the first run loads them."""
    code = (
        "import json, sys\n"
        "from prefect import task\n"
        "before = set(sys.modules)\n"
        "import kf_trainer_prefect.tasks\n"
        "deferred = ('kubernetes', 'kubernetes_asyncio', 'kf_trainer_core.spec',\n"
        "            'kf_trainer_core.cluster.status', 'kf_trainer_core.config',\n"
        "            'kf_trainer_core.manifest.builder', 'kf_trainer_prefect._engine',\n"
        "            'kf_trainer_prefect.flows', 'kf_trainer_prefect.credentials',\n"
        "            'kf_trainer_prefect.decorators')\n"
        "print(json.dumps(sorted(m for m in set(sys.modules) - before\n"
        "      if any(m == d or m.startswith(d + '.') for d in deferred))))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []


def test_package_names_resolve_lazily_and_are_listed() -> None:
    import kf_trainer_prefect

    for name in kf_trainer_prefect.__all__:
        assert name in dir(kf_trainer_prefect)
        assert getattr(kf_trainer_prefect, name) is not None
    with pytest.raises(AttributeError):
        _ = kf_trainer_prefect.no_such_name  # type: ignore[attr-defined]


def test_stopping_a_flow_runs_jobs_in_an_unused_state_dir_stops_none_and_creates_nothing(
    tmp_path: Path,
) -> None:
    from kf_trainer_prefect import KubeflowTrainerCredentials
    from kf_trainer_prefect.flows import stop_flow_run_trainjobs

    never_used = tmp_path / "state"
    creds = KubeflowTrainerCredentials(backend="local", state_dir=str(never_used))
    assert stop_flow_run_trainjobs("0b1c2d3e-flow-run", creds) == []
    assert not never_used.exists()
