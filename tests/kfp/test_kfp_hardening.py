"""Issue 14 in the KFP integration: a misspelt factory argument gets the spec's "did
you mean", clear-text credentials never compile into a pipeline, and the launcher
pod's pip installs take only requirements."""

# No `from __future__ import annotations`: KFP reads component annotations as objects.
from typing import Any

import pytest
from pipeline_parts import train_model

from kf_trainer_core.errors import SpecError
from kf_trainer_kfp import ComponentImage, step_components, trainjob_component, trainjob_launcher


def test_a_misspelt_factory_argument_says_did_you_mean() -> None:
    with pytest.raises(SpecError, match=r"num_node.*Did you mean `num_nodes`"):
        trainjob_component(train_model, num_node=2)
    with pytest.raises(SpecError, match=r"Did you mean `backend_config`"):
        trainjob_launcher(backend_confg={})
    with pytest.raises(SpecError, match=r"Did you mean `namespace`"):
        step_components(namespce="x")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"env": {"HF_TOKEN": "hf_" + "k9" * 15}},
        {"env": {"WANDB": "ghp_" + "k9" * 18}},
        {"packages_to_install": ["-r/etc/passwd"]},
        {"pip_index_urls": ["pypi.org/simple"]},
    ],
    ids=["hf-token", "github-token", "pip-option", "index-without-scheme"],
)
def test_bad_trainer_settings_never_reach_a_pipeline(kwargs: dict[str, Any]) -> None:
    with pytest.raises(SpecError) as info:
        trainjob_component(train_model, **kwargs)
    assert "k9k9k9" not in str(info.value)
    assert "Fix:" in str(info.value)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"packages_to_install": ("--index-url=http://evil/simple",)},
        {"pip_index_urls": ("evil/simple",)},
    ],
)
def test_the_launcher_pod_installs_only_requirements(kwargs: dict[str, Any]) -> None:
    with pytest.raises(SpecError, match="ComponentImage"):
        ComponentImage(**kwargs)


def test_a_namespace_that_is_no_label_fails_at_compile_time() -> None:
    with pytest.raises(SpecError, match="team-a"):
        trainjob_component(train_model, namespace="Team_A")
    with pytest.raises(SpecError, match="namespace"):
        trainjob_launcher(backend_config={"backend": "local", "namespace": "../x"})
