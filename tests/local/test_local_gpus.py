"""GPUs shared out per node on the local backend, on a machine faked to have GPUs
(``CUDA_VISIBLE_DEVICES`` in the submitter's environment, or an ``nvidia-smi`` on
``PATH``): each node gets its own GPUs as ``CUDA_VISIBLE_DEVICES``, ``numProcPerNode:
auto`` starts one process per GPU of the node (not of the machine), admission counts
the GPUs other running jobs hold, and ``jobs get`` says which GPUs a node got.

Before this, every node saw every GPU: a 2-node x 2-GPU job on a 4-GPU machine started
4 processes per node, 8 on 4 GPUs."""

from __future__ import annotations

import os
import re
import stat
import sys
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kf_trainer_core.backends.local import api as local_api
from kf_trainer_core.backends.local import gpus, install_runtime, machine
from kf_trainer_core.backends.local.runtimes import runtime_manifest
from kf_trainer_core.client import TrainerClient
from kf_trainer_core.config import LocalConfig
from kf_trainer_core.errors import FailureClass, ResourcesBusyError, SubmitError, failure_class_of
from kf_trainer_core.manifest.runtimes import DEFAULT_RUNTIMES
from kf_trainer_core.spec import CustomTrainer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))

AUTO = "torch-auto"


def where_am_i() -> str:
    import os

    print(
        f"node={os.environ.get('PET_NODE_RANK')} rank={os.environ.get('RANK')} "
        f"visible={os.environ.get('CUDA_VISIBLE_DEVICES')} "
        f"local_world={os.environ.get('LOCAL_WORLD_SIZE')}",
        flush=True,
    )
    return str(os.environ.get("CUDA_VISIBLE_DEVICES"))


def hold_until(path: str) -> None:
    import os
    import time

    while not os.path.exists(path):
        time.sleep(0.05)


@pytest.fixture(autouse=True)
def _fresh_discovery() -> Iterator[None]:
    # Admission runs in this process: it must see the faked machine, then forget it.
    machine.gpu_devices.cache_clear()
    yield
    machine.gpu_devices.cache_clear()


@pytest.fixture
def four_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")


def auto_runtime(config: LocalConfig) -> str:
    """torch-distributed with ``numProcPerNode: auto`` (upstream's default)."""
    rt = replace(DEFAULT_RUNTIMES["torch-distributed"], name=AUTO, num_proc_per_node="auto")
    install_runtime(config, runtime_manifest(rt))
    return AUTO


def seen(client: TrainerClient, name: str, step: str) -> list[tuple[str, str]]:
    """``(visible devices, local world size)`` of each process of a step."""
    found = []
    for line in client.get_job_logs(name, step):
        m = re.search(r"node=\d+ rank=\d+ visible=(\S+) local_world=(\d+)", line)
        if m:
            found.append((m.group(1), m.group(2)))
    return sorted(found)


@pytest.mark.usefixtures("four_gpus")
def test_two_nodes_asking_two_gpus_each_get_distinct_gpus(
    config: LocalConfig, client: TrainerClient, capsys: pytest.CaptureFixture[str]
) -> None:
    trainer = CustomTrainer(where_am_i, num_nodes=2, resources_per_node={"gpu": 2})
    name = client.train(runtime=auto_runtime(config), trainer=trainer)
    job, result = client.wait(name, timeout=60)
    assert result == "0,1"
    assert [(s.name, s.gpus) for s in job.steps] == [("node-0", ["0", "1"]), ("node-1", ["2", "3"])]
    # auto: one process per GPU of the node, each seeing its node's GPUs only.
    assert seen(client, name, "node-0") == [("0,1", "2"), ("0,1", "2")]
    assert seen(client, name, "node-1") == [("2,3", "2"), ("2,3", "2")]
    assert {s.device_count for s in job.steps} == {"2"}

    from cli_support import run_main

    shown = run_main(capsys, "jobs", "get", name, "--backend", "local",
                     "--state-dir", str(config.state_path()))  # fmt: skip
    assert shown.code == 0, shown.err
    assert "gpu x2 [GPUs 0,1]" in shown.out
    assert "gpu x2 [GPUs 2,3]" in shown.out


@pytest.mark.usefixtures("four_gpus")
def test_a_job_asking_for_no_gpus_gets_the_machines_split_between_its_nodes(
    config: LocalConfig, client: TrainerClient
) -> None:
    name = client.train(
        runtime=auto_runtime(config), trainer=CustomTrainer(where_am_i, num_nodes=2)
    )
    job, _ = client.wait(name, timeout=60)
    assert [s.gpus for s in job.steps] == [["0", "1"], ["2", "3"]]
    assert seen(client, name, "node-1") == [("2,3", "2"), ("2,3", "2")]


def test_a_fake_nvidia_smi_is_this_machines_gpus(
    config: LocalConfig, client: TrainerClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if os.path.isdir("/proc/driver/nvidia/gpus"):
        pytest.skip("this machine's NVIDIA driver is found before nvidia-smi")
    tools = tmp_path / "bin"
    tools.mkdir()
    smi = tools / "nvidia-smi"
    lines = "".join(f'echo "GPU {i}: NVIDIA H200 (UUID: GPU-{i}aaa)"\n' for i in range(4))
    smi.write_text("#!/bin/sh\n" + lines)
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    assert machine.gpu_devices() == ("0", "1", "2", "3")
    trainer = CustomTrainer(where_am_i, num_nodes=2, resources_per_node={"gpu": 2})
    name = client.train(runtime=auto_runtime(config), trainer=trainer)
    job, _ = client.wait(name, timeout=60)
    assert [s.gpus for s in job.steps] == [["0", "1"], ["2", "3"]]
    assert seen(client, name, "node-0") == [("0,1", "2"), ("0,1", "2")]


@pytest.mark.usefixtures("four_gpus")
def test_admission_counts_the_gpus_running_jobs_hold(
    config: LocalConfig, client: TrainerClient, state_dir: Path, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    trainer = CustomTrainer(
        hold_until, func_args={"path": str(release)}, resources_per_node={"gpu": 3}
    )
    holder = client.train(trainer=trainer)
    client.wait_for_job_status(holder, "Running", timeout=60)
    until_gpus = client.get_job(holder).steps[0].gpus
    assert until_gpus == ["0", "1", "2"]

    strict = LocalConfig(state_dir=str(state_dir), on_missing_resources="fail")
    with TrainerClient(strict) as refusing, pytest.raises(SubmitError) as info:
        refusing.train(trainer=CustomTrainer(where_am_i, resources_per_node={"gpu": 2}))
    assert "this machine has 4, 1 of them free (other jobs hold 3)" in str(info.value)
    # It fits the machine, not what the running job leaves: capacity, which an
    # orchestrator retries (configuration would fail its task fast).
    assert isinstance(info.value, ResourcesBusyError)
    assert failure_class_of(info.value) is FailureClass.CAPACITY
    with TrainerClient(strict) as refusing, pytest.raises(SubmitError) as info:
        refusing.train(trainer=CustomTrainer(where_am_i, resources_per_node={"gpu": 5}))
    assert failure_class_of(info.value) is FailureClass.CONFIGURATION  # never fits

    # One fits beside it: the free one. Two are admitted with a warning, and share.
    single = client.train(trainer=CustomTrainer(where_am_i, resources_per_node={"gpu": 1}))
    job, result = client.wait(single, timeout=60)
    assert (job.steps[0].gpus, result) == (["3"], "3")
    shared = client.train(trainer=CustomTrainer(where_am_i, resources_per_node={"gpu": 2}))
    job, result = client.wait(shared, timeout=60)
    assert job.steps[0].gpus == ["3", "0"]
    assert any("nodes run on the same GPUs" in line for line in client.get_job_logs(shared))
    release.touch()
    client.wait(holder, timeout=60)


@pytest.mark.usefixtures("four_gpus")
def test_a_job_holds_its_gpus_from_its_admission_before_its_nodes_start(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Between a job's admission and its nodes' pods (its supervisor starting, its
    # initializers running) nothing of it was counted: only stored pods were, so a job
    # submitted then was admitted to the same GPUs. Its supervisor is held back here.
    started: list[str] = []
    monkeypatch.setattr(local_api, "spawn_supervisor", lambda *a, **k: started.append(a[2]))
    strict = LocalConfig(state_dir=str(state_dir), on_missing_resources="fail")
    with TrainerClient(strict) as client:
        first = client.train(trainer=CustomTrainer(where_am_i, resources_per_node={"gpu": 3}))
        assert started == [first]
        assert client.get_job(first).steps == []
        with pytest.raises(SubmitError) as info:
            client.train(trainer=CustomTrainer(where_am_i, resources_per_node={"gpu": 2}))
        assert "this machine has 4, 1 of them free (other jobs hold 3)" in str(info.value)
        # Suspended, it holds nothing (its pods would be deleted): the second fits.
        client.suspend_job(first)
        second = client.train(trainer=CustomTrainer(where_am_i, resources_per_node={"gpu": 2}))
        assert started == [first, second]
        client.delete_job(first)
        client.delete_job(second)


@pytest.mark.usefixtures("four_gpus")
def test_two_jobs_submitted_at_once_are_not_both_given_the_free_gpus(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each admission read what other jobs hold before either job was written: both saw
    # four free GPUs, and both were admitted to three of them. Here both admissions are
    # done before either job is written (a barrier after them), as two processes' may be.
    admitted = threading.Barrier(2, timeout=60)
    admit = local_api.plan_trainjob

    def both_admitted_first(*args: Any, **kwargs: Any) -> Any:
        planned = admit(*args, **kwargs)
        admitted.wait()
        return planned

    strict = LocalConfig(state_dir=str(state_dir), on_missing_resources="fail")
    release = tmp_path / "release"
    trainer = CustomTrainer(
        hold_until, func_args={"path": str(release)}, resources_per_node={"gpu": 3}
    )
    outcomes: list[str] = []

    def submit() -> None:
        with TrainerClient(strict) as client:
            try:
                outcomes.append(client.train(trainer=trainer))
            except SubmitError as err:
                outcomes.append(str(err))

    with TrainerClient(strict) as client:
        client.wait(client.train(trainer=CustomTrainer(where_am_i)), timeout=60)  # the database
        monkeypatch.setattr(local_api, "plan_trainjob", both_admitted_first)
        threads = [threading.Thread(target=submit) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        refused = [o for o in outcomes if "of them free (other jobs hold 3)" in o]
        started = [o for o in outcomes if o not in refused]
        release.touch()
        assert (len(started), len(refused)) == (1, 1), outcomes
        client.wait(started[0], timeout=60)


# ------------------------------------------------------------- the rules, pure


@pytest.mark.parametrize(
    ("devices", "taken", "nodes", "per_node", "unrequested", "given", "shares"),
    [
        ("0123", "", 2, 2, True, ["01", "23"], False),
        ("01234567", "", 2, 4, True, ["0123", "4567"], False),
        ("01234567", "0145", 2, 2, True, ["23", "67"], False),
        ("0123", "", 2, None, True, ["01", "23"], False),
        ("0123", "01", 2, None, True, ["2", "3"], False),
        ("0", "", 2, None, True, ["0", "0"], True),
        ("0123", "", 2, None, False, ["", ""], False),
        ("01", "", 2, 2, True, ["01", "01"], True),
        ("0123", "012", 1, 2, True, ["30"], True),
        ("", "", 2, 2, True, ["", ""], False),
    ],
)
def test_assign(
    devices: str,
    taken: str,
    nodes: int,
    per_node: int | None,
    unrequested: bool,
    given: list[str],
    shares: bool,
) -> None:
    out, warning = gpus.assign(list(devices), set(taken), nodes, per_node, unrequested=unrequested)
    assert ["".join(node) for node in out] == given
    assert (warning is not None) is shares


def test_held_counts_other_unfinished_jobs_that_asked() -> None:
    def pod(job: str, phase: str, asked: bool, given: str) -> dict[str, object]:
        resources = {"limits": {"nvidia.com/gpu": 1}} if asked else {}
        return {
            "metadata": {
                "namespace": "local",
                "labels": {"jobset.sigs.k8s.io/jobset-name": job},
                "annotations": {gpus.GPUS_ANNOTATION: given},
            },
            "spec": {"containers": [{"name": "node", "resources": resources}]},
            "status": {"phase": phase},
        }

    pods = [
        pod("a", "Running", True, "0,1"),
        pod("b", "Succeeded", True, "2"),  # finished: frees its GPUs
        pod("c", "Running", False, "3"),  # asked for none: holds none
        pod("me", "Running", True, "4"),  # this job's own earlier pods
    ]
    assert gpus.held(pods, "local", "me") == {"0", "1"}
    assert gpus.requested({"requests": {"nvidia.com/gpu": "2"}}) == 2
    assert gpus.requested({"limits": {"cpu": 1}}) is None


def test_cuda_visible_devices_is_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aa, 3,3,-1,5")
    assert machine.gpu_devices() == ("GPU-aa", "3")  # CUDA stops at -1
    machine.gpu_devices.cache_clear()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert machine.gpu_count() == 0
