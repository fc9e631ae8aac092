"""The in-function reporting API: a no-op outside a job, never raises, rank 0 only,
limits of the CRD, and the generated program that carries it into images without
kf-trainer-suite (run here with an interpreter that cannot import the suite)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from kf_trainer_core import report as rp
from kf_trainer_core.manifest.builder import PROGRESS_ANNOTATION, build_trainjob
from kf_trainer_core.spec import CustomTrainer, TrainJobSpec
from kf_trainer_core.spec.function import program_for, progress_from_log, result_from_log

REPORTING = """def train(n: int = 4):
    from kf_trainer_core.report import report, track
    for i in track(range(n)):
        report(metrics={"loss": 1.0 / (i + 1), "note": "x" * 100})
    return {"n": n}
"""

SILENT = """def train(n: int = 4):
    return {"n": n}
"""


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> rp._Reporter:
    """A reporter of its own, outside any job's environment."""
    for var in (rp.URL_ENV, rp.ENABLE_ENV, "RANK", "PET_NODE_RANK", "JOB_COMPLETION_INDEX"):
        monkeypatch.delenv(var, raising=False)
    reporter = rp._Reporter()
    monkeypatch.setattr(rp, "_REPORTER", reporter)
    return reporter


def test_outside_a_job_report_is_a_no_op(
    fresh: rp._Reporter, capsys: pytest.CaptureFixture[str]
) -> None:
    assert rp.report(progress=50, metrics={"loss": 1}) is False
    assert list(rp.track(range(3))) == [0, 1, 2]
    rp.flush()
    assert fresh.thread is None
    assert fresh.sends == 0
    assert capsys.readouterr().out == ""


def test_bad_values_never_raise(fresh: rp._Reporter, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(rp.ENABLE_ENV, "1")
    monkeypatch.setenv(rp.INTERVAL_ENV, "3600")
    assert rp.report(progress="lots") is False  # type: ignore[arg-type]
    assert rp.report(metrics={"loss": object()}) is True  # str() of anything is fine
    assert rp.report(progress=250, eta_seconds=-3) is True
    status = fresh.snapshot()
    assert status["progressPercentage"] == 100
    assert status["estimatedRemainingSeconds"] == 0


def test_limits_of_the_crd(fresh: rp._Reporter, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(rp.ENABLE_ENV, "1")
    monkeypatch.setenv(rp.INTERVAL_ENV, "3600")
    rp.report(metrics={"n" * 80: "v" * 80, "": 1, "empty": ""})
    rp.report(metrics={f"m{i}": i for i in range(300)})
    metrics = fresh.snapshot()["metrics"]
    assert len(metrics) == rp.MAX_METRICS
    assert all(1 <= len(m["name"]) <= 64 and 1 <= len(m["value"]) <= 64 for m in metrics)


@pytest.mark.parametrize(
    ("env", "reports"),
    [
        ({}, True),
        ({"RANK": "0", "PET_NODE_RANK": "0"}, True),
        ({"RANK": "3"}, False),
        ({"JOB_COMPLETION_INDEX": "1"}, False),
        ({"OMPI_COMM_WORLD_RANK": "2"}, False),
    ],
)
def test_rank_zero_only(
    fresh: rp._Reporter, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], reports: bool
) -> None:
    monkeypatch.setenv(rp.ENABLE_ENV, "1")
    monkeypatch.setenv(rp.INTERVAL_ENV, "3600")
    monkeypatch.delenv("OMPI_COMM_WORLD_RANK", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert rp.report(progress=1) is reports
    assert rp.report(progress=1, all_ranks=True) is True


def _isolated_run(program: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run a program where kf-trainer-suite cannot be imported (no site-packages)."""
    path = tmp_path / "prog.py"
    path.write_text(program)
    base = {"PATH": os.environ.get("PATH", ""), "KF_TRAINER_TERMINATION_LOG": str(tmp_path / "t")}
    return subprocess.run(
        [sys.executable, "-I", "-S", str(path)],
        capture_output=True,
        text=True,
        env={**base, **env},
        cwd=tmp_path,
        timeout=60,
        check=False,
    )


def test_the_program_carries_the_reporter_into_an_image_without_the_suite(
    tmp_path: Path,
) -> None:
    check = subprocess.run(
        [sys.executable, "-I", "-S", "-c", "import kf_trainer_core"],
        capture_output=True,
        check=False,
    )
    assert check.returncode != 0  # the interpreter below really cannot import the suite
    run = _isolated_run(program_for("train", REPORTING, {"n": 4}), tmp_path)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert result_from_log(lines) == (True, {"n": 4})
    final = progress_from_log(lines)
    assert final is not None
    assert final["progressPercentage"] == 100
    assert {m["name"]: m["value"] for m in final["metrics"]} == {"loss": "0.25", "note": "x" * 64}
    # The last report comes right before the result: a tail of the log holds both.
    assert rp.MARKER in lines[-2]


def test_a_status_server_that_does_not_answer_does_not_disturb_training(
    tmp_path: Path,
) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    (tmp_path / "token").write_text("secret-token-value")
    run = _isolated_run(
        program_for("train", REPORTING, {"n": 3}),
        tmp_path,
        KUBEFLOW_TRAINER_SERVER_URL=f"https://127.0.0.1:{port}/apis/x/status",
        KUBEFLOW_TRAINER_SERVER_TOKEN=str(tmp_path / "token"),
        KUBEFLOW_TRAINER_SERVER_CA_CERT=str(tmp_path / "missing-ca.crt"),
    )
    assert run.returncode == 0, run.stderr
    assert result_from_log(run.stdout.splitlines()) == (True, {"n": 3})
    assert "cannot report to the TrainJob status server" in run.stderr
    assert run.stderr.count("cannot report") == 1  # said once, not per report
    assert "secret-token-value" not in run.stdout + run.stderr


def test_functions_that_do_not_report_pay_nothing() -> None:
    silent = program_for("train", SILENT, {})
    assert "kf_trainer_core.report" not in silent
    # The reporting module's source (~12 KiB) is only in programs that use it.
    assert len(program_for("train", REPORTING, {})) - len(silent) > 5000
    spec = TrainJobSpec(trainer=CustomTrainer(SILENT))
    assert PROGRESS_ANNOTATION not in build_trainjob(spec).manifest["metadata"]["annotations"]
    spec = TrainJobSpec(trainer=CustomTrainer(REPORTING))
    annotations = build_trainjob(spec).manifest["metadata"]["annotations"]
    assert annotations[PROGRESS_ANNOTATION] == "log"


def test_marker_lines_parse() -> None:
    status = {"progressPercentage": 5, "lastUpdatedTime": "2026-11-23T00:00:00Z"}
    line = "2026-11-23T00:00:00.1Z " + rp.MARKER + json.dumps(status)
    assert rp.parse_line(line) == status
    assert rp.parse_line(rp.MARKER + "{broken") is None
    assert rp.parse_line("just a line") is None
    assert progress_from_log([line, "other"]) == status


def test_the_final_report_arrives_last(
    fresh: rp._Reporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A send in flight when the function ends must not land after the final one."""
    import threading

    monkeypatch.setenv(rp.URL_ENV, "https://127.0.0.1:9/status")
    monkeypatch.setenv(rp.INTERVAL_ENV, "0")
    in_flight, release, second = threading.Event(), threading.Event(), threading.Event()
    arrived: list[int | None] = []

    def slow_post(url: str, status: dict[str, object], timeout: float) -> None:
        if not in_flight.is_set():
            in_flight.set()
            release.wait(10)  # the daemon thread's first POST hangs a while
        else:
            second.set()
        arrived.append(status.get("progressPercentage"))  # type: ignore[arg-type]

    monkeypatch.setattr(rp, "_post", slow_post)
    rp.report(progress=10)
    assert in_flight.wait(10)
    rp.report(progress=100)
    final = threading.Thread(target=rp.flush)
    final.start()
    # Give a flush that does not wait its turn the chance to overtake (it must not).
    second.wait(1.0)
    release.set()
    final.join(10)
    assert arrived[0] == 10
    assert arrived[-1] == 100
