"""Secrets of a container job stay out of the container's inspectable configuration
(issue 24, defect 14): values that came from Secrets reach a shell command through a
file mounted read-only from a private directory, not ``Config.Env``. Units: no engine
needed (the arguments the engine would get, and the shell that reads the file)."""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kf_trainer_core.backends.local.container import runner as rn

SECRET = "s3cr3t 'quoted' $HOME `x`\nsecond line"


def _pod(command: list[str]) -> Any:
    container = {
        "command": command,
        "args": ["--flag"],
        "env": [
            {"name": "PLAIN", "value": "visible"},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
        ],
    }
    return SimpleNamespace(
        name="job-node-0-0", rjob="node", shape=None, obj={"spec": {"containers": [container]}}
    )


def _runner(tmp_path: Path) -> rn.ContainerRunner:
    return rn.ContainerRunner(
        {"apply_resource_limits": False},
        namespace="default",
        name="job",
        uid="0123456789abcdef",
        workspace=tmp_path / "ws",
        run_dir=tmp_path / "run",
        cwd=str(tmp_path),
    )


def test_secret_values_are_not_in_the_engines_arguments(tmp_path: Path) -> None:
    runner = _runner(tmp_path)
    env = {"PLAIN": "visible", "TOKEN": SECRET, "FROM_ENVFROM": "also-secret"}
    args = runner._create_args(_pod(["bash", "-c", "echo hi"]), env)
    shown = json.dumps({k: v for k, v in args.items() if k != "mounts"}, default=str)
    assert "s3cr3t" not in shown
    assert "also-secret" not in shown
    assert args["environment"]["PLAIN"] == "visible"
    assert args["entrypoint"][:4] == ["bash", "-c", rn.SOURCE_SECRETS, "kf-trainer"]
    assert args["entrypoint"][4:] == ["bash", "-c", "echo hi"]
    assert args["command"] == ["--flag"]
    path = runner.secret_file("job-node-0-0")
    assert any(m["Source"] == str(path) and m["ReadOnly"] for m in args["mounts"])
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    # What the container's shell does with it: the values, exactly, then the command.
    script = rn.SOURCE_SECRETS.replace(rn.SECRET_MOUNT, str(path))
    done = subprocess.run(
        [
            "bash",
            "-c",
            script,
            "kf-trainer",
            "bash",
            "-c",
            'printf "%s|%s" "$TOKEN" "$FROM_ENVFROM"',
        ],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert done.stdout == SECRET + "|also-secret"
    runner._forget_secrets("job-node-0-0")
    assert not path.exists()


def test_a_command_that_is_not_a_shell_keeps_its_environment(tmp_path: Path) -> None:
    runner = _runner(tmp_path)
    args = runner._create_args(_pod(["python3", "-m", "x"]), {"TOKEN": SECRET})
    assert args["environment"]["TOKEN"] == SECRET  # documented in docs/backends.md
    assert not runner.secret_file("job-node-0-0").exists()


def test_the_checkpoint_directory_is_mounted_not_hidden(tmp_path: Path) -> None:
    """The suite's own checkpoint variable is no Secret: it stays in the environment,
    rewritten to the path in the container, with its bind mount (hidden with the Secrets,
    it pointed inside the container at the host's path and every checkpoint was lost)."""
    from kf_trainer_core import checkpoints as ck

    runner = _runner(tmp_path)
    host = tmp_path / "state" / "checkpoints" / "default" / "dag-train-run-1"
    env = {"TOKEN": SECRET, ck.DIR_ENV: str(host)}
    args = runner._create_args(_pod(["bash", "-c", "echo hi"]), env)
    inside = f"{ck.DEFAULT_MOUNT}/default/{host.name}"
    assert args["environment"][ck.DIR_ENV] == inside
    assert any(m["Target"] == inside and m["Source"] == str(host) for m in args["mounts"])
    assert ck.DIR_ENV not in runner.secret_file("job-node-0-0").read_text()
