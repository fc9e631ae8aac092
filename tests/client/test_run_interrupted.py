"""Ctrl-C in ``client.run()`` is said as the CLI says it (issue 35, item 5): the wait
stops, the TrainJob keeps running, and the message names how to stop it or follow it
again — no traceback through the driver's internals. It stays a ``KeyboardInterrupt``,
so a program stops as it did and ``except Exception`` does not swallow it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.config import LocalConfig

SCRIPT = textwrap.dedent(
    """
    import sys
    from kf_trainer_core.client import TrainerClient
    from kf_trainer_core.config import LocalConfig
    from kf_trainer_core.spec import CustomTrainer, TrainJobSpec

    SLOW = "def train():\\n    import time\\n    print('started', flush=True)\\n    time.sleep(120)\\n"
    client = TrainerClient(LocalConfig(state_dir=sys.argv[1]))
    spec = TrainJobSpec(trainer=CustomTrainer(SLOW))

    def say(line):
        print(line, flush=True)

    if sys.argv[2] == "catch":
        try:
            client.run(spec, name="slow", on_log=say)
        except Exception:
            print("swallowed by except Exception", flush=True)
        except KeyboardInterrupt as exc:
            print(f"caught {type(exc).__name__} {exc.name} {exc.namespace}", flush=True)
    else:
        client.run(spec, name="slow", on_log=say)
    """
)


def _interrupt(tmp_path: Path, mode: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KF_TRAINER_")}
    env.pop("UV", None)
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "st"), mode],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:  # the job's log: it runs
        if "started" in line:
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_ctrl_c_in_run_says_the_job_keeps_running_and_how_to_stop_it(tmp_path: Path) -> None:
    done = _interrupt(tmp_path, "raise")
    # Python exits 1 for a KeyboardInterrupt subclass (130 only for the exact class).
    assert done.returncode != 0, done.stderr
    lines = done.stderr.strip().splitlines()
    last = lines[-1]
    assert last.startswith("kf_trainer_core.base.errors.WaitInterrupted: interrupted; "), last
    assert "the TrainJob local/slow keeps running" in last
    assert "Stop it with: client.cancel_job('slow') or `" in last
    assert f"--state-dir {tmp_path / 'st'} jobs cancel slow`" in last
    assert "follow it again with: client.wait('slow')" in last
    # The traceback is the caller's line and the client's, not the driver's machinery.
    assert len(lines) < 10, done.stderr
    assert "During handling" not in done.stderr
    assert "drivers.py" not in done.stderr
    # The job keeps running until told otherwise.
    with TrainerClient(LocalConfig(state_dir=str(tmp_path / "st"))) as client:
        assert client.get_job("slow").status.value in ("Created", "Running")
        assert client.cancel_job("slow")


def test_it_is_a_keyboard_interrupt_that_except_exception_does_not_swallow(
    tmp_path: Path,
) -> None:
    done = _interrupt(tmp_path, "catch")
    assert "caught WaitInterrupted slow local" in done.stdout, done.stdout + done.stderr
    assert "swallowed" not in done.stdout
    with TrainerClient(LocalConfig(state_dir=str(tmp_path / "st"))) as client:
        client.cancel_job("slow")
