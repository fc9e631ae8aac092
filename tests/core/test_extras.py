"""A missing orchestrator (or engine SDK) names the extra that installs it (issue 26,
item 4), whichever way the user reaches the adapter."""

from __future__ import annotations

import subprocess
import sys

import pytest

CASES = {
    "prefect": ("prefect", "import kf_trainer_prefect"),
    "kfp": ("kfp", "from kf_trainer_kfp import trainjob_component"),
    "airflow": ("airflow", "from kf_trainer_airflow.operators.trainjob import TrainJobOperator"),
    "airflow-lazy": ("airflow", "import kf_trainer_airflow; kf_trainer_airflow.TrainJobOperator"),
}

PROBE = """
import sys
sys.modules[{module!r}] = None  # as if it were not installed
try:
    {statement}
except ImportError as exc:
    print(type(exc).__name__, exc, sep=": ")
"""


@pytest.mark.parametrize("case", list(CASES))
def test_a_missing_orchestrator_names_the_extra(case: str) -> None:
    module, statement = CASES[case]
    extra = module
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(module=module, statement=statement)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    out = done.stdout.strip()
    assert out.startswith("MissingExtraError: "), out
    assert out.endswith(f"Fix: pip install 'kf-trainer-suite[{extra}]'"), out


def test_the_error_is_a_module_not_found_error() -> None:
    from kf_trainer_core.base.extras import MissingExtraError, require

    with pytest.raises(ModuleNotFoundError, match=r"kf-trainer-suite\[x\]") as caught:
        require("no_such_module_here", "x", "the suite")
    assert isinstance(caught.value, MissingExtraError)
    assert caught.value.name == "no_such_module_here"
    require("json", "x", "the suite")  # installed: nothing happens
