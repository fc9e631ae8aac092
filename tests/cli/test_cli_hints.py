"""Every command the suite prints for a user to run runs as printed (issue 26, item 3):
the program as the user starts it from where they are, and the flags that reach the
same jobs. The quickstart's printed commands are run as printed in
``tests/examples/test_quickstart.py``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from cli_support import cli_env

from kf_trainer_core.base import hints
from kf_trainer_core.cluster.status import to_trainjob
from kf_trainer_core.config import KubernetesConfig, LocalConfig
from kf_trainer_core.programs.submit import Submitted

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def test_inside_a_uv_project_run_by_uv_the_hint_is_uv_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("UV", "uv")
    assert hints.program() == "uv run --frozen kf-trainer"
    assert hints.python_command(["x.py", "--day", "3"]) == "uv run --frozen python x.py --day 3"


def test_outside_uv_the_hint_is_the_command_on_path_or_its_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("UV", raising=False)
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}/usr/bin:/bin")
    assert hints.program() == "kf-trainer"
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # a venv not activated
    assert hints.program() == str(BIN / "kf-trainer")


def test_the_flags_reach_the_same_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KF_TRAINER_STATE_DIR", raising=False)
    monkeypatch.delenv("KF_TRAINER_BACKEND", raising=False)
    local = LocalConfig(state_dir="my state")
    assert hints.where_flags(local) == ["--backend", "local", "--state-dir", "my state"]
    assert hints.where_flags(LocalConfig()) == ["--backend", "local"]
    kube = KubernetesConfig(kubeconfig="/k/config", context="gpu", namespace="team-a")
    assert hints.where_flags(kube) == [
        "--kubeconfig",
        "/k/config",
        "--context",
        "gpu",
        "-n",
        "team-a",
    ]
    assert hints.command(local, ["jobs", "get", "x"]).endswith(
        "--backend local --state-dir 'my state' jobs get x"
    )


def test_the_reuse_notice_names_the_backend_of_the_job(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KF_TRAINER_STATE_DIR", raising=False)
    obj = {
        "metadata": {"name": "train-a", "namespace": "local"},
        "spec": {"runtimeRef": {"name": "torch-distributed"}},
        "status": {"conditions": [{"type": "Complete", "status": "True"}]},
    }
    done = Submitted(job=to_trainjob(obj), created=False, obj=obj)
    notice = done.reuse_notice(LocalConfig(state_dir="/s"))
    assert notice is not None
    assert "--backend local --state-dir /s jobs logs train-a)" in notice


SLOW = "def train():\n    import time\n    print('started', flush=True)\n    time.sleep(60)\n"


@pytest.mark.parametrize("how", ["run", "wait", "logs"])
def test_ctrl_c_says_the_job_keeps_running_and_how_to_stop_it(tmp_path: Path, how: str) -> None:
    """Ctrl-C while following: the real job name, and two commands that work as printed."""
    spec = tmp_path / "slow.yaml"
    spec.write_text(
        yaml.safe_dump(
            {"runtime": "torch-distributed", "trainer": {"type": "CustomTrainer", "func": SLOW}}
        )
    )
    state = tmp_path / "st"
    where = ["--backend", "local", "--state-dir", str(state)]
    script = str(BIN / "kf-trainer")
    env = cli_env(PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("UV", None)
    if how != "run":
        subprocess.run(
            [script, *where, "run", str(spec), "--name", "slow", "--detach"],
            env=env,
            check=True,
            capture_output=True,
            timeout=120,
        )
    args = {
        "run": ["run", str(spec), "--name", "slow"],
        "wait": ["jobs", "wait", "slow"],
        "logs": ["jobs", "logs", "slow", "-f"],
    }[how]
    proc = subprocess.Popen(
        [script, *where, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline()  # following: the log's first line, or the job's state
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    last = err.strip().splitlines()[-1]
    assert "local/slow keeps running" in last
    assert "NAME" not in last
    stop = last.split("Stop it with: ")[1].split(" — ")[0]
    assert stop == f"kf-trainer --backend local --state-dir {state} jobs cancel slow"
    stopped = subprocess.run(stop, shell=True, env=env, capture_output=True, text=True)
    assert stopped.returncode == 0, stopped.stderr
    assert "local/slow: cancelled (delete)" in stopped.stdout
