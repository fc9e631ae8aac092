"""``kf-trainer`` against the Kubernetes-API test server, reading the command's real
output: list filters and ``-o json``, ``get``, ``logs -f`` on a running job, ``wait`` on
a failing job (exit 1 with the failure), progress from ``status.trainerStatus``,
events, cancel/suspend/resume/delete, and one-line errors with distinct exit codes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from cli_support import run_main, run_script, scenario, spec

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.cluster.status import JobState


def test_list_filters_and_json_in_a_namespace_of_other_jobs(
    client: TrainerClient, where: list[str]
) -> None:
    ok = client.submit(spec(labels={"team": "a"}), name="ok-job").job.name
    bad = client.submit(spec(scenario(preset="fail"), labels={"team": "b"}), name="bad-job")
    mine = client.submit(spec(labels={"team": "b"}), identity=("dag", "train", "run-1"))
    others = [client.submit(spec(), name=f"other-{i}").job.name for i in range(3)]
    for name in (ok, bad.job.name, mine.job.name, *others):
        client.wait(name, ("Complete", "Failed"), timeout=30)

    everything = run_script("jobs", "list", "-o", "json", *where)
    assert everything.code == 0, everything.err
    assert {j["name"] for j in everything.json()} == {ok, bad.job.name, mine.job.name, *others}

    failed = run_script("jobs", "list", "--status", "Failed", "-o", "json", *where)
    assert [j["name"] for j in failed.json()] == [bad.job.name]
    assert failed.json()[0]["status"] == "Failed"

    team_b = run_script("jobs", "list", "-l", "team=b", "-o", "json", *where)
    assert {j["name"] for j in team_b.json()} == {bad.job.name, mine.job.name}

    by_identity = run_script("jobs", "list", "--identity", "dag/train/run-1", "-o", "yaml", *where)
    assert by_identity.code == 0
    assert f"name: {mine.job.name}" in by_identity.out
    assert bad.job.name not in by_identity.out

    # Plain columns when stdout is not a terminal: one row per job, greppable.
    text = run_script("jobs", "list", "--status", "complete", *where)
    header, *rows = text.out.splitlines()
    assert header.split() == [
        "NAME",
        "NAMESPACE",
        "STATUS",
        "RUNTIME",
        "NODES",
        "AGE",
        "DURATION",
        "PROGRESS",
    ]
    assert sorted(r.split()[0] for r in rows) == sorted([ok, mine.job.name, *others])
    assert all(r.split()[2] == "Complete" and r.split()[-1] == "100%" for r in rows)


def test_logs_follow_a_running_job_to_its_end(client: TrainerClient, where: list[str]) -> None:
    lines = [f"step {i}: loss={1 / (i + 1):.3f}" for i in range(8)]
    name = client.submit(spec(scenario(duration=3.0, logs=lines)), name="follow-me").job.name
    client.wait(name, "Running", timeout=30)
    assert client.get_job(name).status is JobState.RUNNING

    followed = run_script("jobs", "logs", name, "-f", *where)
    assert followed.code == 0, followed.err
    assert followed.out.splitlines()[-len(lines) :] == lines
    # By the time -f returns, the step has ended.
    assert client.wait(name, timeout=30)[0].status is JobState.COMPLETE

    tail = run_script("jobs", "logs", name, "--tail", "2", *where)
    assert tail.out.splitlines() == lines[-2:]


def test_wait_on_a_failing_job_exits_1_with_the_failure(
    client: TrainerClient, where: list[str]
) -> None:
    name = client.submit(
        spec(scenario(preset="fail", exit_code=3, duration=1.0, logs=["boom: CUDA error"])),
        name="fails",
    ).job.name
    waited = run_script("jobs", "wait", name, *where)
    assert waited.code == 1
    assert f"default/{name} failed" in waited.err
    assert "exit code 3" in waited.err or "exit 3" in waited.err
    assert "boom: CUDA error" in waited.err
    assert "Traceback" not in waited.err
    # Progress lines on stdout (not a terminal): the state as it changes.
    assert "Failed" in waited.out or "Running" in waited.out or "Created" in waited.out

    got = run_script("jobs", "get", name, *where)
    assert got.code == 0
    assert "Failure:" in got.out
    assert "boom: CUDA error" in got.out
    # A failed job has a fix too, as a restarting one does: what to change, then submit.
    fix = next(line for line in got.out.splitlines() if line.startswith("Fix:"))
    assert f"jobs logs {name} --step node-0" in fix
    assert "submit the job again" in fix
    as_json = run_script("jobs", "get", name, "-o", "json", *where).json()
    assert as_json["job"]["status"] == "Failed"
    assert as_json["failure"]["exit_code"] == 3


def test_wait_shows_trainer_status_progress_and_the_result(
    client: TrainerClient, where: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    updates = [[25, 30, {"loss": "0.9"}], [50, 20, {"loss": "0.5"}], [75, 10, {"loss": "0.2"}]]
    name = client.submit(
        spec(scenario(duration=3.0, progress=updates, termination_message='{"loss": 0.1}')),
        name="progressing",
    ).job.name
    waited = run_main(capsys, "jobs", "wait", name, *where)
    assert waited.code == 0, waited.err
    assert "50% eta=20s loss=0.5" in waited.out or "75% eta=10s loss=0.2" in waited.out
    assert f"default/{name}: Complete in" in waited.out
    assert 'result: {"loss": 0.1}' in waited.out

    listed = run_main(capsys, "jobs", "list", *where)
    row = next(r for r in listed.out.splitlines() if r.startswith(name))
    assert row.split()[-1] == "100%"

    got = run_main(capsys, "jobs", "get", name, *where)
    assert 'Result:  {"loss": 0.1}' in got.out
    assert "node-0" in got.out
    assert "Complete" in got.out


def test_suspend_resume_cancel_delete_and_events(
    client: TrainerClient, where: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    name = client.submit(spec(scenario(preset="never-finish")), name="long-one").job.name
    client.wait(name, "Running", timeout=30)

    assert run_main(capsys, "jobs", "suspend", name, *where).out.strip() == (
        f"default/{name}: suspended"
    )
    client.wait(name, "Suspended", timeout=30)
    assert run_main(capsys, "jobs", "resume", name, *where).code == 0
    client.wait(name, "Running", timeout=30)

    events = run_main(capsys, "jobs", "events", name, "-o", "json", *where)
    assert events.code == 0
    assert isinstance(events.json(), list)

    kept = run_main(capsys, "jobs", "cancel", name, "--action", "keep", *where)
    assert kept.code == 0
    assert client.get_job(name).status is JobState.RUNNING
    cancelled = run_main(capsys, "jobs", "cancel", name, *where)
    assert cancelled.out.strip() == f"default/{name}: cancelled (delete)"
    deadline = time.monotonic() + 30
    while any(j.name == name for j in client.list_jobs()):
        assert time.monotonic() < deadline
        time.sleep(0.1)

    gone = run_main(capsys, "jobs", "delete", name, *where)
    assert gone.code == 3
    assert gone.err.startswith("kf-trainer: error: not found in namespace default: long-one")


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["jobs", "list", "-n", "Team_A"], 2, "--namespace 'Team_A' is not a valid namespace"),
        (["-n", "Team_A", "jobs", "list"], 2, "Fix: use e.g. 'team-a'"),
        (["jobs", "list", "--identity", ""], 2, "--identity is empty"),
        (["jobs", "get", "Bad_Name"], 2, "'Bad_Name' is not a valid TrainJob name"),
        (["jobs", "logs", ""], 2, "not a valid TrainJob name"),
        (["jobs", "get", "no-such-job"], 3, "not found"),
        (["jobs", "wait", "no-such-job"], 3, "not found"),
        (["jobs", "list", "--state-dir", "/tmp/x"], 2, "--state-dir does not apply"),
        (["jobs", "list", "--backend", "nope"], 2, "--backend 'nope' is unknown"),
        (["jobs", "list", "--status", "Sleeping"], 2, "Invalid value for '--status'"),
        (["jobs", "frobnicate"], 2, "No such command 'frobnicate'"),
        (["jobs", "list", "--kubeconfig", "/nonexistent"], 2, "'/nonexistent' does not exist"),
        # A context the kubeconfig lacks is bad input, refused before any request.
        (["jobs", "list", "--context", "nope"], 2, "the kubeconfig has no context 'nope'"),
    ],
)
def test_errors_are_one_line_with_distinct_exit_codes(
    where: list[str], capsys: pytest.CaptureFixture[str], args: list[str], code: int, says: str
) -> None:
    result = run_main(capsys, *args, *([] if "--kubeconfig" in args else where))
    assert result.code == code, result.err
    assert says in result.err
    assert len(result.err.strip().splitlines()) == 1
    assert result.err.startswith("kf-trainer: error: ")
    assert result.out == ""


def test_an_unreachable_server_is_exit_6(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    from kf_trainer_core.testing.server import KubeTestServer

    server = KubeTestServer()
    server.start(controller=False)
    path = server.kubeconfig(tmp_path / "kubeconfig", namespace="default")  # type: ignore[operator]
    server.stop()
    result = run_main(capsys, "jobs", "list", "--kubeconfig", str(path))
    assert result.code == 6, result.err
    assert "cannot reach" in result.err
    assert len(result.err.strip().splitlines()) == 1


def test_bad_backend_env_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KF_TRAINER_BACKEND", "{backend: local")
    result = run_main(capsys, "jobs", "list")
    assert result.code == 2
    assert "$KF_TRAINER_BACKEND is not JSON" in result.err
    monkeypatch.setenv("KF_TRAINER_BACKEND", '{"backend": "local", "state_dirr": "/x"}')
    result = run_main(capsys, "jobs", "list")
    assert result.code == 2
    assert "state_dirr" in result.err


def test_runtimes_list_and_get(where: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    listed = run_main(capsys, "runtimes", "list", "-o", "json", *where)
    assert listed.code == 0, listed.err
    names = {r["name"] for r in listed.json()}
    assert "torch-distributed" in names
    table = run_main(capsys, "runtimes", "list", *where)
    assert table.out.splitlines()[0].split() == [
        "NAME",
        "KIND",
        "FRAMEWORK",
        "NODES",
        "DEVICE",
        "IMAGE",
    ]
    got = run_main(capsys, "runtimes", "get", "torch-distributed", "-o", "yaml", *where)
    assert got.code == 0
    assert "name: torch-distributed" in got.out
    assert "launcher: torchrun" in got.out
    text = run_main(capsys, "runtimes", "get", "torch-distributed", *where)
    assert text.out.splitlines()[0].split() == ["name:", "torch-distributed"]
    missing = run_main(capsys, "runtimes", "get", "no-such-runtime", *where)
    assert missing.code == 3, missing.err


def test_run_of_a_job_too_big_for_any_node_times_out_saying_why_once(
    client: TrainerClient, where: list[str], tmp_path: Path
) -> None:
    # Issue 35: the scheduler's message twice in one run-on line, "a retry will not
    # help" beside "wait longer", and nothing on what was left behind.
    big = spec()
    big["trainer"]["resources_per_node"] = {"nvidia.com/gpu": 16}
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(big))
    done = run_script("run", str(path), "--name", "big", "--timeout", "7", *where)
    assert done.code == 5, done.err
    pending = "Pending: step node-0 cannot be scheduled: 0/4 nodes can give it 16 nvidia.com/gpu (each has fewer in all or fewer unused)"
    # The progress line says it once the job has settled (5 s after its creation).
    assert f"[kf-trainer] default/big: {pending}" in done.err
    error = done.err[done.err.index("kf-trainer: ") :].splitlines()
    assert (
        error[0]
        == f"kf-trainer: TrainJob default/big did not reach Complete within 7s; it is {pending}"
    )
    assert error[1] == "failure class: capacity"
    assert error[2].startswith("fix: make the job fit: ")
    assert error[3].startswith("left behind: TrainJob default/big still exists (Pending); ")
    assert error[3].endswith(" -n default jobs delete big (Python: client.delete_job('big'))")
    assert "retry will not help" not in done.err
    assert "wait longer" not in done.err
    assert client.get_job("big").display_status == "Pending"
    got = run_script("jobs", "get", "big", *where)
    assert f"Status:    {pending}" in got.out
    assert client.delete_job("big")
