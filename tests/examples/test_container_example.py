"""The quickstart on the container backend, by configuration only: the same file, with
``KF_TRAINER_BACKEND`` naming the container backend, the test image and a mount of the
work directory (the containers' view of the data a cluster would get from a shared
volume). Skips where no engine or test image exists."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from container_support import assert_nothing_left, engine_or_skip, image_or_skip
from kf_trainer_core.client import TrainerClient

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_quickstart_in_containers(tmp_path: Path) -> None:
    engine = engine_or_skip()
    workdir = tmp_path / "work"
    workdir.mkdir()
    backend = {
        "backend": "container",
        "state_dir": str(tmp_path / "state"),
        "image": image_or_skip(engine),
        "pull_policy": "Never",
        "mounts": [f"{workdir}:{workdir}"],
    }
    env = {**os.environ, "KF_TRAINER_BACKEND": json.dumps(backend)}
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / "quickstart.py"), "--workdir", str(workdir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "train on container backend" in out.stdout
    assert "4/4 promote" in out.stdout
    with TrainerClient(backend) as client:
        [job] = client.list_jobs()
        assert job.status.value == "Complete"
        client.delete_job(job.name)
    assert_nothing_left(engine, [str(job.uid)])
