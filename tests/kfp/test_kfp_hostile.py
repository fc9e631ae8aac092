"""A hostile job in a KFP pipeline on the local backend: its escapes, markup, marker
lines, malformed progress and a long line reach the task's log, its summary Markdown
and its metrics harmlessly (issue 24 defects 1, 5, 15)."""

# No `from __future__ import annotations`: KFP reads pipeline annotations as objects.
import re
from pathlib import Path

import pytest
from kfp import dsl

from kf_trainer_core.base import untrusted
from kf_trainer_core.spec import CustomTrainer, TrainJobSpec
from kf_trainer_kfp import ComponentImage, trainjob_launcher

HERE = ComponentImage.current_environment()

# The training function, as source: it prints a terminal title, a clear-screen, rich
# markup, an OSC-8 link, a malformed progress marker, a progress marker with a metric
# name made of markup and markdown, and a 100,000-character line; then it returns.
HOSTILE = """
def hostile():
    import time
    esc, bel = chr(27), chr(7)
    # Spelled in two parts: the whole marker must come from the job's output, not
    # from this source, which KFP prints with the executor's input.
    marker = "##kf-trainer-" + "progress## "
    print(marker + '{"lastUpdatedTime":"x","metrics":[1]}', flush=True)
    print(marker + '{"lastUpdatedTime":"2026-11-25T10:00:00Z",'
          '"progressPercentage":"abc",'
          '"metrics":[{"name":"loss[/x](http://evil)|<b>","value":"1"}]}', flush=True)
    print(esc + "]0;title" + bel + "hello " + esc + "[2J[bold]markup[/x]", flush=True)
    print(esc + "]8;;http://evil/" + esc + "\\\\link" + esc + "]8;;" + esc + "\\\\", flush=True)
    print("A" * 100_000, flush=True)
    time.sleep(0.3)
    return {"note": esc + "[31m red ![x](http://evil/i.png)"}
"""


def test_task_log_summary_and_metrics_of_a_hostile_job(
    local_kfp: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("kf_trainer_core.backends.local")
    backend = {"backend": "local", "state_dir": str(tmp_path / "state")}
    launch = trainjob_launcher(backend_config=backend, component_image=HERE)
    spec = TrainJobSpec(trainer=CustomTrainer(HOSTILE))

    @dsl.pipeline
    def pipe() -> None:
        launch(spec=spec)

    pipe()
    out = capsys.readouterr()
    # kfp.local colours its own lines (SGR); the job's sequences are what must not pass.
    log = re.sub("\x1b\\[(?:\\d+;)*\\d*m", "", out.out + out.err)
    assert "\x1b[31m red" not in out.out + out.err
    assert "hello [bold]markup[/x]" in log  # the job's text, shown as text
    assert "\x1b" not in log
    assert "\x07" not in log
    assert "##kf-trainer-progress##" not in log
    assert "##kf-trainer-result##" not in log
    assert "A" * 100_000 not in log
    assert "cut at" in log
    assert max(len(line) for line in log.splitlines()) < 6 * untrusted.LINE_LIMIT

    outputs = {p.name: p for p in local_kfp.rglob("*") if p.is_file()}
    summary = outputs["summary"].read_text()
    assert "\x1b" not in summary
    assert "\x07" not in summary
    assert len(summary) < 40_000
    # The metric name and the result are code spans (its [..](..) cannot become a link,
    # its <b> cannot become HTML); the result is JSON, its escape character JSON's \u001b.
    assert "- **Metrics:** `loss[/x](http://evil)|<b>=1`" in summary
    assert '- **Result:** `{"note": "\\u001b[31m red ![x](http://evil/i.png)"}`' in summary
