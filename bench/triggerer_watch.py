"""Time every event-loop callback of Airflow's trigger runner with
:class:`~kf_trainer_core.testing.loopwatch.LoopWatch` (blocked time: wall time less
the time the thread waited for a core and less garbage collection), so that a verdict
on blocking holds on a loaded machine, where Airflow's own watchdog and asyncio's debug
mode also count the time other processes had the cores.

The triggerer's supervisor forks the process that runs the triggers: ``sitecustomize``
(written by :func:`write_sitecustomize` into a folder put first on the triggerer's
``PYTHONPATH``) registers :func:`_in_child` to run after every fork of it. Each child
writes what it saw to ``KF_LOOPWATCH_DIR/<pid>.json`` every second.
"""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path
from typing import Any

#: Callbacks blocked this long are recorded (with samples of their stack).
RECORD_FROM = 0.05


def write_sitecustomize(folder: Path) -> Path:
    """A ``sitecustomize.py`` in ``folder`` that arms the watch in forked children."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "sitecustomize.py"
    path.write_text(
        "import os\n"
        "if os.environ.get('KF_LOOPWATCH_DIR'):\n"
        "    from bench.triggerer_watch import _in_child\n"
        "    os.register_at_fork(after_in_child=_in_child)\n"
    )
    return path


def _in_child() -> None:
    from kf_trainer_core.testing.loopwatch import LoopWatch

    out = Path(os.environ["KF_LOOPWATCH_DIR"]) / f"{os.getpid()}.json"
    watch = LoopWatch(threshold=RECORD_FROM)
    watch.install()  # this thread: the forked child's only one, which runs the loop

    def dump() -> None:
        while True:
            data = {
                "callbacks": watch.callbacks,
                "max_blocked": watch.max_blocked,
                "gc_longest": watch.gc_longest,
                "slow": [s.as_dict() for s in list(watch.slow)],
            }
            tmp = out.with_suffix(".tmp")
            tmp.write_text(json.dumps(data))
            tmp.replace(out)
            threading.Event().wait(1.0)

    threading.Thread(target=dump, name="loopwatch-dump", daemon=True).start()


#: Airflow names the task that runs a trigger "<dag>/<run>/<task>/<map>/<try> (ID <n>)".
_TRIGGER_TASK = re.compile(r"^task .+ \(ID \d+\) ")


def ours(slow: dict[str, Any]) -> bool:
    """Whether a slow callback is a trigger's own (a step of the task Airflow runs it
    in) or has our code on a sampled stack."""
    return bool(_TRIGGER_TASK.match(slow["what"])) or any(
        "kf_trainer_" in line or "/bench/triggerer_" in line
        for stack in slow["stacks"]
        for line in stack
    )


def collect(folder: Path) -> dict[str, Any]:
    """Every child's callbacks, summed; slow ones split into ours and the rest."""
    callbacks = 0
    slow: list[dict[str, Any]] = []
    for path in folder.glob("*.json"):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        callbacks += int(data["callbacks"])
        slow += data["slow"]
    mine = [s for s in slow if ours(s)]
    rest = [s for s in slow if not ours(s)]

    def brief(s: dict[str, Any]) -> dict[str, Any]:
        inner = [line for stack in s["stacks"][:1] for line in stack[-6:]]
        return {
            "what": s["what"],
            "blocked": round(s["blocked"], 3),
            "wall": round(s["wall"], 3),
            "cpu": round(s["cpu"], 3),
            "stack": inner,
        }

    return {
        "callbacks": callbacks,
        "ours_over_0_05s": len(mine),
        "ours_over_0_2s": [brief(s) for s in mine if s["blocked"] > 0.2],
        "ours_worst_blocked_s": round(max((s["blocked"] for s in mine), default=0.0), 3),
        "airflow_over_0_05s": len(rest),
        "airflow_over_0_2s": sum(s["blocked"] > 0.2 for s in rest),
        "airflow_worst": [brief(s) for s in sorted(rest, key=lambda s: -s["blocked"])[:3]],
    }
