"""What a job sends back is untrusted (issue 24 defects 1, 5, 15; issue 26 item 5):
every reader validates it, neutralises its escapes, caps its lines and hides the
suite's marker lines — and never raises because of it."""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone
from typing import Any

import pytest

from kf_trainer_core.base import untrusted
from kf_trainer_core.cluster import kueue
from kf_trainer_core.cluster.cost import job_cost
from kf_trainer_core.cluster.job_summary import job_summary, summary_markdown
from kf_trainer_core.cluster.status import (
    Failure,
    JobState,
    Progress,
    failure_of,
    progress,
    to_trainjob,
)
from kf_trainer_core.spec.function import progress_from_log

ESC = "\x1b"
HOSTILE_LINE = (
    f"{ESC}]0;owned{chr(7)}a {ESC}]8;;http://evil.example/{ESC}\\link{ESC}]8;;{ESC}\\ "
    f"{ESC}[2J{ESC}[Hb [bold]x[/x] \x9b31m\u202eevil"
)
BAD_STATUSES: list[Any] = [
    {"lastUpdatedTime": "x", "metrics": [1]},
    {"progressPercentage": "abc"},
    {"progressPercentage": 140, "estimatedRemainingSeconds": -1},
    {"metrics": "loss"},
    {"metrics": [{"name": {"a": 1}, "value": "1"}, {"name": "", "value": "2"}]},
    {"metrics": [{"name": "x" * 65, "value": "1"}]},
    [1, 2],
    "text",
    {"estimatedRemainingSeconds": True, "lastUpdatedTime": 12},
]


def _job(status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "j", "namespace": "ns"},
        "spec": {"runtimeRef": {"name": "torch-distributed"}},
        # Running (a node ready): a job that is not running shows no time left.
        "status": {"trainerStatus": status, "jobsStatus": [{"name": "node", "ready": 1}]},
    }


@pytest.mark.parametrize("status", BAD_STATUSES)
def test_a_malformed_trainer_status_never_breaks_a_reader(status: Any) -> None:
    # Defect 1: what a job wrote into trainerStatus (status server, local supervisor).
    job = to_trainjob(_job(status))
    assert job.progress is None or isinstance(job.progress, Progress)
    line = "##kf-trainer-progress## " + json.dumps(status)
    read = progress_from_log(["x", line, "y"])
    assert read is None or progress(_job(read)) is not None


def test_valid_fields_are_kept_and_one_warning_names_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    status = {
        "progressPercentage": "abc",
        "estimatedRemainingSeconds": 30,
        "lastUpdatedTime": "2026-11-25T10:00:00Z",
        "metrics": [
            {"name": "loss", "value": "0.25"},
            {"name": "step", "value": "7"},
            {"name": "phase", "value": "warmup"},
            1,
        ],
    }
    with caplog.at_level(logging.WARNING, logger="kf_trainer_core.base.untrusted"):
        for _ in range(3):  # every read of the job: one warning, not three
            got = progress(_job(status))
    assert got == Progress(
        estimated_remaining_seconds=30,
        last_updated="2026-11-25T10:00:00Z",
        # Issue 26 item 8: numbers where they are numbers.
        metrics={"loss": 0.25, "step": 7, "phase": "warmup"},
    )
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == [
        "TrainJob ns/j: ignored malformed fields of its progress report: "
        "progressPercentage, 1 of metrics"
    ]


def test_progress_read_from_a_log_is_validated() -> None:
    # The Kubernetes path without a status server: node-0's log.
    lines = ['##kf-trainer-progress## {"lastUpdatedTime":"x","metrics":[1],"progressPercentage":5}']
    assert progress_from_log(lines, "TrainJob ns/j") == {"progressPercentage": 5}
    deep = "##kf-trainer-progress## " + "[" * 100_000
    assert progress_from_log([deep]) is None


def test_text_neutralises_escapes_and_controls() -> None:
    shown = untrusted.line(HOSTILE_LINE)
    assert ESC not in shown
    assert "\x07" not in shown
    assert "\x9b" not in shown
    assert "\u202e" not in shown
    assert shown == "a link b [bold]x[/x] \ufffdevil"
    assert untrusted.line("tab\tkept") == "tab\tkept"
    assert untrusted.text("two\nlines", newlines=True) == "two\nlines"
    assert untrusted.line("two\nlines") == "two\ufffdlines"


def test_long_lines_are_cut_saying_where() -> None:
    big = "A" * 20_000_000
    cut = untrusted.line(big)
    assert len(cut) <= untrusted.LINE_LIMIT
    assert cut.endswith(f"… [kf-trainer: cut at 4,032 of {len(big):,} characters]")
    assert untrusted.line(cut) == cut  # cutting twice changes nothing


def test_marker_lines_are_hidden_from_people() -> None:
    lines = [
        "step 1",
        '##kf-trainer-progress## {"progressPercentage":5}',
        "##kf-trainer-result## {}",
        HOSTILE_LINE,
    ]
    assert untrusted.shown_lines(lines) == ["step 1", untrusted.line(HOSTILE_LINE)]


def test_a_failure_keeps_bounded_safe_text() -> None:
    # Defect 15 and 5: the failure explanation (errors, run's stderr, jobs get, task logs).
    obj = {
        "metadata": {"name": "j", "namespace": "ns"},
        "status": {
            "conditions": [
                {"type": "Failed", "status": "True", "reason": "Err", "message": HOSTILE_LINE}
            ]
        },
    }
    tail = ["A" * 20_000_000, "##kf-trainer-result## 1", HOSTILE_LINE, "ValueError: boom"]
    failure = failure_of(obj, log_tail=tail)
    text = failure.describe()
    assert len(text) < 20_000
    assert ESC not in text
    assert "##kf-trainer" not in text
    assert "cut at 4,032 of 20,000,000 characters" in text
    # Built again from data (XCom, JSON): the same guarantees.
    again = Failure.model_validate({"message": "m" * 10**6, "log_tail": [HOSTILE_LINE]})
    assert len(again.message) <= untrusted.LINE_LIMIT
    assert ESC not in again.log_tail[0]


def test_markdown_summaries_escape_job_text() -> None:
    job = to_trainjob(
        _job(
            {
                "lastUpdatedTime": "2026-11-25T10:00:00Z",
                "metrics": [{"name": "x](http://evil)", "value": "1"}],
            }
        )
    )
    failure = Failure(
        reason="Err",
        message="line one\n\n# heading [link](http://evil)",
        classified_by="the training code raised ![img](http://evil/x.png)",
        failure_class="user-code",
        log_tail=["```", "</details><script>"],
    )
    md = job_summary(job, failure=failure)
    assert "\n# heading" not in md
    assert "![img](http" not in md
    assert "````text\n```\n</details><script>\n````" in md  # a fence it cannot close
    assert "(http://evil)`" in md  # the metric is inline code
    assert summary_markdown(name="j", namespace="n", runtime="r", status=JobState.FAILED.value)


def test_rich_never_reads_markup_in_job_data(monkeypatch: pytest.MonkeyPatch) -> None:
    # Defect 5: a metric named ``loss[/x]`` made ``jobs wait`` die with MarkupError.
    from kf_trainer_core.cli import _follow, _output

    job = to_trainjob(
        _job(
            {
                "lastUpdatedTime": "2026-11-25T10:00:00Z",
                "progressPercentage": 40,
                "metrics": [{"name": "loss[/x]", "value": "[bold]"}],
            }
        )
    )
    with _follow.Tracker("j", live=True) as tracker:
        tracker.update(job)
    monkeypatch.setattr(_output, "is_terminal", lambda: True)
    _output.table(["NAME"], [["[/x] closes nothing"], [HOSTILE_LINE]])


def test_lineage_takes_no_model_uri_that_is_not_a_printable_uri() -> None:
    from kf_trainer_core.manifest.lineage import result_outputs

    assert result_outputs({"model_uri": "s3://m/\x1b]0;x\x07"}) == []
    assert result_outputs({"model_uri": "s3://m/" + "a" * 10_000}) == []
    assert len(result_outputs({"model_uri": "s3://m/run-1"})) == 1


def _failed_pod(**terminated: Any) -> dict[str, Any]:
    labels = {
        "jobset.sigs.k8s.io/replicatedjob-name": "node",
        "batch.kubernetes.io/job-completion-index": "0",
    }
    state = {"exitCode": 1, "reason": "Error", **terminated}
    return {
        "metadata": {"name": "j-node-0-0-x", "labels": labels},
        "spec": {
            "containers": [{"name": "node", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]
        },
        "status": {
            "phase": "Failed",
            "containerStatuses": [{"name": "node", "state": {"terminated": state}}],
        },
    }


def _failed_job(created: str, ended: str) -> dict[str, Any]:
    failed = {"type": "Failed", "status": "True", "reason": "Err", "lastTransitionTime": ended}
    return {
        "metadata": {"name": "j", "namespace": "ns", "creationTimestamp": created},
        "spec": {"runtimeRef": {"name": "torch-distributed"}},
        "status": {"conditions": [failed]},
    }


@pytest.mark.parametrize("bad", ["", "not a time", "2026-13-45T99:99:99Z", "1" * 100])
def test_a_malformed_timestamp_is_absent_never_an_error(bad: str) -> None:
    # Timestamps went into pydantic's datetime as the cluster wrote them: one it could
    # not read made to_trainjob (every get, list and wait) raise a ValidationError.
    pod = _failed_pod(startedAt="2026-11-28T13:28:41Z", finishedAt=bad)
    job = to_trainjob(_failed_job(bad, bad), [pod])
    assert job.creation_timestamp is None
    assert job.completion_timestamp is None
    assert job.steps[0].finished_at is None
    assert job.steps[0].started_at == datetime(2026, 11, 28, 13, 28, 41, tzinfo=timezone.utc)


def test_a_timestamp_without_a_zone_is_read_as_utc() -> None:
    # pydantic kept a zoneless stamp naive: the job's cost and summary then raised
    # TypeError, subtracting it from the aware ones beside it.
    pod = _failed_pod(startedAt="2026-11-28T13:28:41Z", finishedAt="2026-11-28T13:29:41")
    job = to_trainjob(_failed_job("2026-11-28T13:28:40", "2026-11-28T13:30:40Z"), [pod])
    assert job.creation_timestamp == datetime(2026, 11, 28, 13, 28, 40, tzinfo=timezone.utc)
    spent = job_cost(job)
    assert (spent.wall_seconds, spent.pending_seconds, spent.gpu_hours) == (120.0, 1.0, 0.033333)
    assert "2m 00s" in job_summary(job)


def test_a_lone_surrogate_in_job_text_never_reaches_a_utf8_sink() -> None:
    # JSON's "\ud800" escapes decode to lone surrogates, which untrusted.text kept: a
    # metric named so made the job's JSON (-o json, XComs, triggers) and every UTF-8
    # write of its progress raise UnicodeEncodeError.
    line = '##kf-trainer-progress## {"metrics": [{"name": "loss\\ud800", "value": "\\udc00"}]}'
    read = progress_from_log([line])
    assert read is not None
    job = to_trainjob(_job(read))
    assert job.progress is not None
    assert job.progress.metrics == {"loss\ufffd": "\ufffd"}
    json.loads(job.model_dump_json())
    " ".join(job.progress_summary()).encode()
    assert untrusted.line("a\ud800b\udfff") == "a\ufffdb\ufffd"
    assert untrusted.line("a\U0001f600") == "a\U0001f600"  # a real pair stays


def test_a_job_that_ends_before_its_creation_took_no_time() -> None:
    # The API server stamps the creation, the Trainer's clock the end: a job failed at
    # once by a controller a second behind showed "Duration: -1h 59m 59s".
    job = to_trainjob(_failed_job("2026-11-28T13:28:41Z", "2026-11-28T13:28:40Z"))
    assert "- **Duration:** 0s\n" in job_summary(job)
    assert job_cost(job).wall_seconds == 0.0


def test_what_kueue_says_of_a_workload_is_kept_clean_and_capped() -> None:
    # Kueue's condition messages are cluster data (up to 32 KiB each): escapes out, capped.
    said = "\x1b]8;;http://x\x07couldn't assign flavors\x1b[2J " + "x" * 40_000
    workload = {
        "metadata": {"name": "w"},
        "spec": {"queueName": "lq"},
        "status": {
            "conditions": [
                {"type": "QuotaReserved", "status": "False", "reason": "Pending\x1b[31m",
                 "message": said},
                {"type": "Evicted", "status": "True", "reason": "Preempted\x07",
                 "message": said},
            ]
        },
    }  # fmt: skip
    queue = kueue.queue_status("lq", workload)
    kept = [queue.pending_reason, queue.pending_message]
    kept += [text for e in queue.evictions for text in (e.reason, e.message)]
    assert len(kept) == 4
    for text in kept:
        assert text is not None
        assert "\x1b" not in text
        assert "\x07" not in text
        assert len(text) <= untrusted.LINE_LIMIT
    assert queue.pending_message is not None
    assert queue.pending_message.startswith("couldn't assign flavors")
