"""A hostile job in a Prefect flow on the local backend: its escapes, markup, marker
lines, malformed progress and a long line reach the task log and the artifacts
harmlessly (issue 24 defects 1, 5, 15; issue 26 item 5)."""

from __future__ import annotations

from pathlib import Path

import pytest
from prefect import flow
from prefect_support import read_artifacts, read_logs

from kf_trainer_core.base import untrusted
from kf_trainer_core.cluster.outputs import JobOutputs
from kf_trainer_core.spec import CustomTrainer, TrainJobSpec
from kf_trainer_prefect import KubeflowTrainerCredentials, run_trainjob

pytestmark = pytest.mark.usefixtures("prefect_server")


def hostile(size: int = 100_000) -> None:
    """Escapes, markup and a long line in the log; malformed progress; then it fails."""
    import time

    esc, bel = chr(27), chr(7)
    print(
        '##kf-trainer-progress## {"lastUpdatedTime":"2026-11-25T10:00:00Z",'
        '"progressPercentage":"abc","metrics":[{"name":"loss[/x](http://evil)","value":"1"}]}',
        flush=True,
    )
    print(esc + "]0;title" + bel + "hello " + esc + "[2J[bold]markup[/x]", flush=True)
    print("A" * size, flush=True)
    time.sleep(0.3)
    print('##kf-trainer-progress## {"lastUpdatedTime":"x","metrics":[1]}', flush=True)
    time.sleep(0.3)
    raise ValueError("boom " + esc + "]8;;http://evil/" + esc + "\\ ![x](http://evil/i.png)")


def test_task_log_and_artifacts_of_a_hostile_job(tmp_path: Path) -> None:
    creds = KubeflowTrainerCredentials(backend="local", state_dir=str(tmp_path / "state"))

    @flow
    def train() -> JobOutputs:
        return run_trainjob(TrainJobSpec(trainer=CustomTrainer(hostile)), creds, name="hostile")

    state = train(return_state=True)
    assert state.is_failed()
    flow_run_id = state.state_details.flow_run_id
    logs = read_logs(flow_run_id)
    text = "\n".join(logs)
    assert "\x1b" not in text
    assert "\x07" not in text
    assert "##kf-trainer-progress##" not in text
    assert "##kf-trainer-result##" not in text
    assert any("hello [bold]markup[/x]" in line for line in logs)
    assert any("cut at 4,032 of 100,000 characters" in line for line in logs)
    # The 100,000-character line is cut wherever it is kept: no record (the failure's
    # holds its log tail, Prefect's repr of the exception all of it on one line) comes near.
    assert max(len(line) for line in logs) < 6 * untrusted.LINE_LIMIT
    artifacts = {a.key: a for a in read_artifacts(flow_run_id) if a.key}
    summary = artifacts["hostile-summary"].data
    assert "\x1b" not in summary
    # The exception's image is text: escaped in prose, else in code spans and blocks.
    assert "raised ValueError: boom  !\\[x\\](http://evil/i.png)" in summary
    assert "`jobset failed due to" in summary
    assert "```text\nhello [bold]markup[/x]" in summary
    assert "`loss[/x](http://evil)=1`" in summary  # the metric, inline code
    assert len(summary) < 40_000
