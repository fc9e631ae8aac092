"""A hostile job on the local backend, read with ``kf-trainer``: its terminal escapes,
rich markup, malformed progress reports, marker lines and a 20 MB line reach the user
harmlessly (issue 24 defects 1, 5 and 15; issue 26 item 5)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from cli_support import run_main, run_script

from kf_trainer_core.base import untrusted

# Printable source: the escapes are made in the pod, not carried in the spec.
HOSTILE = """\
def train(size: int = 0, fail: bool = False):
    import time
    E = chr(27)
    B = chr(7)
    good = ('{"lastUpdatedTime":"2026-11-25T10:00:00Z","progressPercentage":"abc",'
            '"metrics":[{"name":"loss[/x]","value":"0.25"},{"name":"\\\\u001b]0;t'
            '\\\\u0007acc","value":"3"},{"name":"n","value":[1]}]}')
    print("##kf-trainer-progress## " + good, flush=True)
    print(E + "]0;owned title" + B + "title " + E + "]8;;http://evil.example/" + E
          + "\\\\link" + E + "]8;;" + E + "\\\\ " + E + "[2J" + E + "[Hclear "
          + "[bold red]markup[/] [/x] bell" + B, flush=True)
    if size:
        print("A" * size, flush=True)
    time.sleep(0.3)
    # The last report is broken: the local supervisor must not copy it into the status.
    print('##kf-trainer-progress## {"lastUpdatedTime":"x","metrics":[1]}', flush=True)
    time.sleep(0.3)
    if fail:
        raise ValueError("boom " + E + "[31m[/x] " + "B" * size)
    return {"ok": E + "[2J"}
"""


def _spec(path: Path, **args: object) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "runtime": "torch-distributed",
                "trainer": {"type": "CustomTrainer", "func": HOSTILE, "func_args": args},
            }
        )
    )
    return path


@pytest.fixture
def local(tmp_path: Path) -> list[str]:
    return ["--backend", "local", "--state-dir", str(tmp_path / "state")]


def _harmless(text: str) -> None:
    assert "\x1b" not in text
    assert "\x07" not in text
    assert "\x9b" not in text
    assert "##kf-trainer-progress##" not in text
    assert "##kf-trainer-result##" not in text


def test_cli_shows_a_hostile_job_harmlessly(
    tmp_path: Path,
    local: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran = run_script(*local, "run", str(_spec(tmp_path / "h.yaml")), "--name", "hostile")
    assert ran.code == 0, ran.err
    _harmless(ran.out + ran.err)
    assert "title link clear [bold red]markup[/] [/x] bell\ufffd" in ran.out

    logs = run_main(capsys, "jobs", "logs", "hostile", *local)
    assert logs.code == 0, logs.err
    _harmless(logs.out)
    assert "[bold red]markup[/] [/x]" in logs.out
    raw = run_main(capsys, "jobs", "logs", "hostile", "--raw", *local)
    assert "##kf-trainer-progress##" in raw.out
    assert "##kf-trainer-result##" in raw.out
    assert "\x1b]8;;http://evil.example/" in raw.out

    # On a terminal: rich tables and the live progress bar, with markup in the data.
    from kf_trainer_core.cli import _follow, _output

    monkeypatch.setattr(_output, "is_terminal", lambda: True)
    monkeypatch.setattr(_follow, "is_terminal", lambda: True)
    for args in (["jobs", "list"], ["jobs", "get", "hostile"], ["jobs", "wait", "hostile"]):
        shown = run_main(capsys, *args, *local)
        assert shown.code == 0, (args, shown.err)
        _harmless(shown.out + shown.err)
    got = run_main(capsys, "jobs", "get", "hostile", *local)
    assert "loss[/x]=0.25" in got.out  # the metric, as named; the malformed ones dropped
    assert ", acc=3" in got.out  # its OSC title sequence removed
    assert "abc" not in got.out


def test_a_20_mb_line_is_cut_everywhere_it_is_kept(
    tmp_path: Path, local: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    size = 20 * 1024 * 1024
    spec = _spec(tmp_path / "big.yaml", size=size, fail=True)
    ran = run_script(*local, "run", str(spec), "--name", "big", "--quiet", timeout=300)
    assert ran.code == 1
    assert len(ran.err) < 100_000, len(ran.err)
    assert "cut at" in ran.err
    _harmless(ran.err)

    got = run_main(capsys, "jobs", "get", "big", *local)
    assert got.code == 0
    assert len(got.out) < 100_000
    # The log tail and the exception's text: each line cut, saying how long it was.
    assert re.search(r"cut at 4,032 of 20,9\d\d,\d{3} characters\]", got.out), got.out[-3000:]
    logs = run_main(capsys, "jobs", "logs", "big", "--tail", "5", *local)
    longest = max(len(line) for line in logs.out.splitlines())
    assert longest <= untrusted.LINE_LIMIT, [
        (len(ln), ln[:80], ln[-80:]) for ln in logs.out.splitlines()
    ]
