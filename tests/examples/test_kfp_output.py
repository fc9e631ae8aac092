"""``examples/kfp_retraining.py`` shows what a user needs — each task, what it printed,
the TrainJob and its result — not the KFP executor's own INFO lines and the
``executor_input`` JSON it dumps for every task (about 60 lines a task)."""

from __future__ import annotations

import io

#: What ``kfp.local`` streams for one task (indented by its print), shortened.
STREAMED = """\
    [KFP Executor 2026-11-25 15:02:01,891 INFO]: Looking for component `train` in --component_module_path `/tmp/x/ephemeral_component.py`
    [KFP Executor 2026-11-25 15:02:01,907 INFO]: Loading KFP component "train" from /tmp/x/ephemeral_component.py (directory "/tmp/x" and module name "ephemeral_component")
    [KFP Executor 2026-11-25 15:02:01,913 INFO]: Got executor_input:
    {
        "inputs": {
            "parameterValues": {
                "lr": 0.5
            }
        },
        "outputFile": "/root/train/executor_output.json"
    }
    [kf-trainer] TrainJob local/train-dd0c232fdc (runtime torch-distributed)
    epoch 0: loss=0.6931
    {
    not JSON of the executor: shown
    }
    [kf-trainer] TrainJob local/train-dd0c232fdc: Complete; result {"ranks": 1}
    [KFP Executor 2026-11-25 15:02:05,600 WARNING]: something the user must see
    [KFP Executor 2026-11-25 15:02:05,636 INFO]: Wrote executor output file to /root/train/executor_output.json.
    Traceback (most recent call last):
"""


def test_the_executor_info_lines_and_input_json_are_hidden() -> None:
    from kfp_retraining import ExecutorLogFilter

    out = io.StringIO()
    shown = ExecutorLogFilter(out)
    # Written in pieces, as the indenting print does (indent, then the line).
    for line in STREAMED.splitlines(keepends=True):
        shown.write(line[:4])
        shown.write(line[4:])
    shown.write("    no newline yet")
    shown.flush()
    assert out.getvalue().splitlines() == [
        "    [kf-trainer] TrainJob local/train-dd0c232fdc (runtime torch-distributed)",
        "    epoch 0: loss=0.6931",
        "    {",
        "    not JSON of the executor: shown",
        "    }",
        '    [kf-trainer] TrainJob local/train-dd0c232fdc: Complete; result {"ranks": 1}',
        "    [KFP Executor 2026-11-25 15:02:05,600 WARNING]: something the user must see",
        "    Traceback (most recent call last):",
        "    no newline yet",
    ]


def test_the_json_is_hidden_only_right_after_its_line() -> None:
    from kfp_retraining import ExecutorLogFilter

    out = io.StringIO()
    shown = ExecutorLogFilter(out)
    shown.write("[KFP Executor 2026 INFO]: Got executor_input:\nnot a document\n}\n")
    assert out.getvalue() == "not a document\n}\n"
