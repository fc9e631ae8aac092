"""The adapter pages list every public parameter (read from the code, so that a new
parameter without documentation fails here), their links resolve, and the README's
Examples section names commands that exist."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from examples_support import DOCS, ROOT

_SPAN = re.compile(r"```.*?```|`[^`\n]+`", re.DOTALL)
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def documented(page: Path) -> set[str]:
    """Every identifier inside the page's code spans and code blocks."""
    return {w for span in _SPAN.findall(page.read_text()) for w in _WORD.findall(span)}


def params(func: Callable[..., Any], *skip: str) -> set[str]:
    target = getattr(func, "fn", func)  # a Prefect task or flow: its function
    names = set(inspect.signature(target).parameters) - {"self", "kwargs", "task_options"}
    return names - set(skip)


def missing(page: str, names: Iterable[str]) -> list[str]:
    return sorted(set(names) - documented(DOCS / page))


def test_airflow_page_lists_every_parameter() -> None:
    from kf_trainer_airflow.decorators.trainer import (
        _KubeflowTrainerDecoratedOperator,
        kubeflow_trainer_task,
    )
    from kf_trainer_airflow.hooks.trainer import _ALIASES, _TUNING, KubeflowTrainerHook
    from kf_trainer_airflow.links.trainjob import LINK_XCOM_KEY
    from kf_trainer_airflow.operators.trainjob import XCOM_KEYS, TrainJobOperator
    from kf_trainer_airflow.provider_info import CONN_FIELDS
    from kf_trainer_airflow.sensors.trainjob import TrainJobSensor
    from kf_trainer_airflow.triggers.trainjob import TrainJobTrigger

    names = {
        *params(TrainJobOperator.__init__),
        "durable",
        *params(_KubeflowTrainerDecoratedOperator.__init__),
        *params(kubeflow_trainer_task),
        *params(TrainJobSensor.__init__),
        *params(TrainJobTrigger.__init__),
        *params(KubeflowTrainerHook.__init__),
        *CONN_FIELDS,
        *_TUNING,
        *_ALIASES,
        "disable_verify_ssl",
        *XCOM_KEYS,
        LINK_XCOM_KEY,
        "render_manifest",
        "dry_run",
        "TrainJobLink",
        "TrainJobFailedException",
    }
    assert missing("airflow.md", names) == []


def test_prefect_page_lists_every_parameter() -> None:
    import kf_trainer_prefect
    from kf_trainer_prefect import KubeflowTrainerCredentials

    names = set(kf_trainer_prefect.__all__) | set(KubeflowTrainerCredentials.model_fields)
    for name in kf_trainer_prefect.__all__:
        obj = getattr(kf_trainer_prefect, name)
        if callable(obj) and not isinstance(obj, type):
            names |= params(obj, "fn")
    names |= {"backend_config", "get_client", "get_async_client", "dashboard_link"}
    names |= {"from_kubernetes_credentials"}
    assert missing("prefect.md", names) == []


def test_kfp_page_lists_every_parameter_input_and_output() -> None:
    import kf_trainer_kfp
    from kf_trainer_kfp import ComponentImage, StepComponents
    from kf_trainer_kfp._source import (
        JOB_OUTPUTS,
        RESULT_ARTIFACTS,
        RESULT_OUTPUTS,
        SPEC_INPUTS,
        backend_inputs,
        identity_inputs,
        wait_inputs,
    )
    from kf_trainer_kfp.components import step_components, trainjob_component, trainjob_launcher
    from kf_trainer_kfp.inputs import CA_CERT_DATA_ENV, KUBECONFIG_CONTENT_ENV, TOKEN_ENV

    names = {
        *kf_trainer_kfp.__all__,
        *params(trainjob_component),
        *params(trainjob_launcher),
        *params(step_components),
        *StepComponents.__dataclass_fields__,
        *ComponentImage.__dataclass_fields__,
        "prebuilt",
        "current_environment",
        *(p.name for p in (*SPEC_INPUTS, *backend_inputs(), *identity_inputs(), *wait_inputs())),
        *(name for name, _ in (*RESULT_OUTPUTS, *JOB_OUTPUTS)),
        *(name for name, _, _ in RESULT_ARTIFACTS),
        "job_name",
        "step",
        "task_name",
        "action",
        "cancelled",
        TOKEN_ENV,
        KUBECONFIG_CONTENT_ENV,
        CA_CERT_DATA_ENV,
    }
    assert missing("kfp.md", names) == []


#: The repository's pages online (pyproject.toml's project URLs): README links there.
_ONLINE = re.compile(r"https://github\.com/kf-trainer-suite/kf-trainer-suite/(?:blob|tree)/main/")


@pytest.mark.parametrize(
    "page", ["README.md", "docs/airflow.md", "docs/prefect.md", "docs/kfp.md", "docs/cli.md"]
)
def test_links_to_the_repository_resolve(page: str) -> None:
    """Relative links, and absolute ones into the repository, name files that exist."""
    path = ROOT / page
    prose = _SPAN.sub("", path.read_text())  # code may hold anything that looks like a link
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", prose):
        if _ONLINE.match(target):
            local = ROOT / _ONLINE.sub("", target)
            assert local.exists(), f"{page} links to {target}, which is not in the repository"
        elif "://" not in target:
            assert (path.parent / target).exists(), f"{page} links to a missing {target}"


def test_readme_links_work_where_pypi_shows_it() -> None:
    """The README is the PyPI page: a relative link there leads nowhere (issue 35)."""
    prose = _SPAN.sub("", (ROOT / "README.md").read_text())
    relative = [
        t for t in re.findall(r"\]\(([^)]+)\)", prose) if "://" not in t and not t.startswith("#")
    ]
    assert relative == [], (
        f"make these absolute (https://github.com/kf-trainer-suite/...): {relative}"
    )


def test_readme_examples_commands_exist() -> None:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Examples", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"uv run --frozen python (examples/\S+\.py)", section)
    assert commands == [
        "examples/airflow_retraining.py",
        "examples/prefect_retraining.py",
        "examples/kfp_retraining.py",
    ]
    for command in commands:
        assert (ROOT / command).is_file()
    for page in ("docs/airflow.md", "docs/prefect.md", "docs/kfp.md", "docs/testing.md"):
        assert (
            f"](https://github.com/kf-trainer-suite/kf-trainer-suite/blob/main/{page})" in section
        )
