"""What the test DAGs share: the connection, scenarios chosen per run, and training
functions (defined in a real file so that their source can be captured).

The simulated Trainer reads a job's behaviour from the annotation
``testing.kf-trainer-suite/scenario``; the DAGs template it from the run's conf, so one
DAG serves several tests: ``dag.test(run_conf={"scenario": "fail"})``.
"""

from __future__ import annotations

from typing import Any

from kf_trainer_core.spec import Annotations
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION

CONN_ID = "kf_test"
START = "2026-01-01"


def scenario(default: str = "success") -> Annotations:
    """The run's scenario (``dag_run.conf["scenario"]``), templated."""
    text = "{{ dag_run.conf.get('scenario', '" + default + "') }}"
    return Annotations({SCENARIO_ANNOTATION: text})


def scenario_by_try(first: str, then: str) -> Annotations:
    """One scenario for the first try of a task, another for its retries."""
    text = "{{ '" + first + "' if ti.try_number == 1 else '" + then + "' }}"
    return Annotations({SCENARIO_ANNOTATION: text})


def double(x: int = 1) -> dict[str, Any]:
    """Runs for real in the simulator's exec mode; its return value comes back."""
    print(f"doubling {x}")
    return {"double": x * 2}


def braces(word: str = "x") -> str:
    """Source that Jinja would misread if it were rendered: {{ }} and {# #}."""
    text = f"{{{{ {word} }}}} {{# not a comment #}}"
    print(text)
    return text


def hostile(size: int = 100_000) -> None:
    """What a hostile job prints: escapes, markup, malformed progress, a long line; then
    it fails with an exception that carries escapes too."""
    import time

    esc, bel = chr(27), chr(7)
    print(
        '##kf-trainer-progress## {"lastUpdatedTime":"2026-11-25T10:00:00Z",'
        '"progressPercentage":"abc","metrics":[{"name":"loss[/x]","value":"1"}]}',
        flush=True,
    )
    print(esc + "]0;title" + bel + "hello " + esc + "[2J[bold]markup[/x]", flush=True)
    print("A" * size, flush=True)
    time.sleep(0.3)
    print('##kf-trainer-progress## {"lastUpdatedTime":"x","metrics":[1]}', flush=True)
    time.sleep(0.3)
    raise ValueError("boom " + esc + "]8;;http://evil/" + esc + "\\ end")


def explode(lr: float = 10.0) -> None:
    """Fails the way training code does."""
    print(f"starting with lr={lr}")
    raise ValueError(f"loss diverged at lr={lr}")


def chatty(n: int = 3) -> dict[str, int]:
    """Writes its log over a few seconds (while its task is deferred), then a line with
    a terminal escape that is longer than any line the suite shows."""
    import time

    for i in range(n):
        print(f"chatty line {i}", flush=True)
        time.sleep(1.0)
    print(chr(27) + "[2Jcleared " + "B" * 5000, flush=True)
    return {"n": n}


#: What a test does at a named point of a task's run (``at(point)`` calls it): the
#: DAG files and the tests import this one module, so both see the same mapping.
HOOKS: dict[str, Any] = {}


def at(point: str) -> None:
    """Call the test's hook for ``point``, if it set one."""
    hook = HOOKS.get(point)
    if hook is not None:
        hook()
