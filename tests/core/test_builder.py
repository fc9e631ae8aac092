"""The builder: manifests the real CRD accepts, deterministic bytes, programs that run
unchanged, and the launcher each runtime needs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from spec_table import valid_specs
from train_functions import shell_hostile, train_linear

from kf_trainer_core.manifest.builder import (
    IDENTITY_ANNOTATION,
    IDENTITY_LABEL,
    SPEC_HASH_ANNOTATION,
    build_trainjob,
    render_yaml,
)
from kf_trainer_core.manifest.runtimes import RuntimeInfo
from kf_trainer_core.spec import CustomTrainer, Name, TrainJobSpec
from kf_trainer_core.spec.function import RESULT_MARKER, TERMINATION_LOG_ENV

SPECS = valid_specs()


def built(key: str, **kw: Any) -> dict[str, Any]:
    return build_trainjob(
        SPECS[key], namespace="team-a", identity=("dag", key, "run-1"), **kw
    ).manifest


@pytest.fixture(scope="module")
def crds() -> Any:
    from kf_trainer_core.testing.crd import find_upstream, load_upstream_crds

    upstream = find_upstream()
    if upstream is None:
        pytest.skip("../shared/upstream is missing: cannot check manifests against the real CRD")
    return load_upstream_crds(upstream)


@pytest.fixture(scope="module")
def main_crds() -> Any:
    from kf_trainer_core.testing.crd import find_upstream, load_upstream_crds

    upstream = find_upstream()
    if upstream is None:
        pytest.skip("../shared/upstream is missing: cannot check manifests against the real CRD")
    return load_upstream_crds(upstream, branch="main")


@pytest.mark.parametrize("key", sorted(SPECS))
def test_manifest_is_accepted_by_the_real_crd(key: str, crds: Any, main_crds: Any) -> None:
    manifest = built(key)
    for schemas in (crds, main_crds):
        schema = schemas["trainjobs.trainer.kubeflow.org"]
        assert schema.unknown_fields(manifest) == []
        errors = schema.validate(schema.apply_defaults(manifest))
        assert errors == [], [str(e) for e in errors]


@pytest.mark.parametrize("key", sorted(SPECS))
def test_manifest_parses_with_the_trainer_api_models(key: str) -> None:
    models = pytest.importorskip("kubeflow_trainer_api.models")
    manifest = built(key)
    job = models.TrainerV1alpha1TrainJob.from_dict(manifest)
    assert job is not None
    assert job.metadata.name == manifest["metadata"]["name"]
    # The model keeps every field we set: nothing was silently dropped.
    assert job.to_dict()["spec"]["runtimeRef"]["name"] == manifest["spec"]["runtimeRef"]["name"]


@pytest.mark.parametrize("key", sorted(SPECS))
def test_same_spec_same_bytes(key: str) -> None:
    first = render_yaml(built(key))
    again = TrainJobSpec.parse(SPECS[key].model_dump_json())
    second = render_yaml(
        build_trainjob(again, namespace="team-a", identity=("dag", key, "run-1")).manifest
    )
    assert first == second
    assert yaml.safe_load(first) == built(key)


def test_spec_hash_follows_content_not_identity() -> None:
    spec = SPECS["function-full"]
    a = build_trainjob(spec, identity="x")
    b = build_trainjob(spec, identity="x")
    assert a.spec_hash == b.spec_hash == a.manifest["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
    changed = spec.model_copy(update={"trainer": CustomTrainer(train_linear, num_nodes=5)})
    assert build_trainjob(changed, identity="x").spec_hash != a.spec_hash


def test_identity_names_and_labels_the_job() -> None:
    a = build_trainjob(SPECS["function-defaults"], identity=("etl", "train", "manual__2026"))
    b = build_trainjob(SPECS["function-defaults"], identity=("etl", "train", "manual__2027"))
    assert a.name != b.name
    assert a.name.startswith("train-linear-")
    meta = a.manifest["metadata"]
    assert meta["annotations"][IDENTITY_ANNOTATION] == "etl/train/manual__2026"
    assert len(meta["labels"][IDENTITY_LABEL]) <= 63


def test_name_option_wins_over_identity() -> None:
    spec = SPECS["function-defaults"].with_options(Name("chosen"))
    assert build_trainjob(spec, identity="x").name == "chosen"


def test_name_limit_follows_the_observed_runtime() -> None:
    spec = SPECS["function-defaults"].with_options(Name("n" * 44))
    mpi = RuntimeInfo(
        name="torch-distributed",
        policy="torch",
        replicated_jobs=("node", "launcher"),
        observed=True,
    )
    build_trainjob(spec, runtime=mpi)  # 44 fits a launcher
    with pytest.raises(ValueError, match="at most 44"):
        build_trainjob(SPECS["function-defaults"].with_options(Name("n" * 45)), runtime=mpi)


@pytest.mark.parametrize(
    ("key", "launcher"),
    [("function-defaults", "torchrun"), ("jax", "python"), ("deepspeed-mpi", "mpirun")],
)
def test_launcher_follows_the_runtime_policy(key: str, launcher: str) -> None:
    command = built(key)["spec"]["trainer"]["command"]
    if launcher == "mpirun":
        assert command[:3] == ["mpirun", "--hostfile", "/etc/mpi/hostfile"]
        assert "exec ${KF_TRAINER_LAUNCHER:-python}" in command[5]
    else:
        assert command[:2] == ["bash", "-c"]
        assert f"exec ${{KF_TRAINER_LAUNCHER:-{launcher}}}" in command[2]


def test_torchtune_arguments() -> None:
    trainer = built("torchtune")["spec"]["trainer"]
    assert trainer["command"] == ["tune", "run"]
    assert "dtype=bf16" in trainer["args"]
    assert "dataset.data_dir=/workspace/dataset/data" in trainer["args"]
    assert "model.lora_rank=8" in trainer["args"]
    assert "dataset.column_map={input:question,output:answer}" in trainer["args"]


def test_resource_aliases() -> None:
    res = built("function-full")["spec"]["trainer"]["resourcesPerNode"]
    assert res["limits"] == {
        "nvidia.com/gpu": 8,
        "cpu": 32,
        "memory": "256Gi",
        "ephemeral-storage": "100Gi",
    }
    assert built("mig")["spec"]["trainer"]["resourcesPerNode"]["limits"] == {
        "nvidia.com/mig-1g.5gb": 1
    }
    assert built("fractional-cpu")["spec"]["trainer"]["resourcesPerNode"]["limits"]["cpu"] == "0.5"


def test_credentials_are_secret_references() -> None:
    init = built("torchtune")["spec"]["initializer"]
    assert init["model"]["secretRef"] == {"name": "hf-token"}
    env = built("function-full")["spec"]["trainer"]["env"]
    assert {
        "name": "WANDB_API_KEY",
        "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "key"}},
    } in env


def _run_command(
    command: list[str], tmp_path: Path
) -> tuple[subprocess.CompletedProcess[str], str]:
    log = tmp_path / "termination-log"
    env = {**os.environ, "KF_TRAINER_LAUNCHER": sys.executable, TERMINATION_LOG_ENV: str(log)}
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)
    return proc, log.read_text() if log.exists() else ""


def test_the_command_runs_user_code_verbatim(tmp_path: Path) -> None:
    # $, backticks, quotes and heredoc words must reach Python untouched.
    spec = TrainJobSpec(trainer=CustomTrainer(shell_hostile))
    command = build_trainjob(spec).manifest["spec"]["trainer"]["command"]
    proc, message = _run_command(command, tmp_path)
    assert proc.returncode == 0, proc.stderr
    expected = "$HOME `echo hacked` $(echo also) \\n 'single' \"double\" EOM EOF"
    assert expected in proc.stdout
    assert "hacked" not in proc.stdout.replace("`echo hacked`", "")
    assert json.loads(message) == {"text": expected}


def test_the_command_reports_the_return_value(tmp_path: Path) -> None:
    spec = TrainJobSpec(trainer=CustomTrainer(train_linear, func_args={"lr": 0.1, "epochs": 2}))
    command = build_trainjob(spec).manifest["spec"]["trainer"]["command"]
    proc, message = _run_command(command, tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(message)
    assert set(result) == {"w", "loss"}
    assert (
        f"{RESULT_MARKER}{json.dumps(result, sort_keys=True, separators=(',', ':'))}" in proc.stdout
    )


def test_only_rank_zero_of_node_zero_reports(tmp_path: Path) -> None:
    spec = TrainJobSpec(trainer=CustomTrainer(train_linear))
    command = build_trainjob(spec).manifest["spec"]["trainer"]["command"]
    log = tmp_path / "log"
    env = {
        **os.environ,
        "KF_TRAINER_LAUNCHER": sys.executable,
        TERMINATION_LOG_ENV: str(log),
        "PET_NODE_RANK": "1",
    }
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0
    assert not log.exists()
    assert RESULT_MARKER not in proc.stdout


def test_large_return_value_stays_in_the_log(tmp_path: Path) -> None:
    source = "def big():\n    return {'blob': 'x' * 5000}\n"
    command = build_trainjob(TrainJobSpec(trainer=CustomTrainer(source))).manifest["spec"][
        "trainer"
    ]["command"]
    proc, message = _run_command(command, tmp_path)
    assert proc.returncode == 0
    assert message == ""
    assert "termination message keeps 4096" in proc.stderr
    assert RESULT_MARKER in proc.stdout


def test_failing_function_fails_the_command(tmp_path: Path) -> None:
    source = "def boom():\n    raise RuntimeError('diverged at step 7')\n"
    command = build_trainjob(TrainJobSpec(trainer=CustomTrainer(source))).manifest["spec"][
        "trainer"
    ]["command"]
    proc, message = _run_command(command, tmp_path)
    assert proc.returncode != 0
    assert "diverged at step 7" in proc.stderr
    assert message == ""
