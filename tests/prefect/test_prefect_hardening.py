"""Issue 14 in the Prefect integration: a malformed inline kubeconfig never reaches an
error's text (not when the block is made, not from ``get_client()``), namespaces are
checked, clear-text credentials are refused, and a misspelt decorator argument gets the
spec's "did you mean" (no Prefect server needed)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from kf_trainer_core.errors import SpecError
from kf_trainer_prefect import KubeflowTrainerCredentials, trainjob_task

TOKEN = "s3cr3t-T0KEN-of-the-cluster-42"


def _chain(err: BaseException) -> str:
    texts = []
    seen: BaseException | None = err
    while seen is not None:
        texts.append(f"{seen!s} {seen!r}")
        seen = seen.__cause__ or seen.__context__
    return "\n".join(texts)


@pytest.mark.parametrize(
    "content",
    [
        f"apiVersion: v1\nusers:\n- name: u\n  user:\n    token: {TOKEN}: oops\n",
        f'{{"users": [{{"user": {{"token": "{TOKEN}"',
        f"- {TOKEN}\n",
    ],
    ids=["yaml-error", "json-unclosed", "not-a-mapping"],
)
def test_a_malformed_inline_kubeconfig_is_refused_without_its_text(content: str) -> None:
    with pytest.raises(ValidationError) as info:
        KubeflowTrainerCredentials(kubeconfig_content=content)
    assert "kubeconfig_content" in str(info.value)
    assert TOKEN not in _chain(info.value)


def test_get_client_never_quotes_a_kubeconfig_saved_before_the_check() -> None:
    # A block stored by an older version skips validation when built like this.
    block = KubeflowTrainerCredentials.model_construct(
        kubeconfig_content=f"users:\n- token: {TOKEN}: x\n"
    )
    with pytest.raises(ValueError, match="kubeconfig_content") as info:
        block.get_client()
    assert TOKEN not in _chain(info.value)


@pytest.mark.parametrize("namespace", ["Team_A", "../../x"])
def test_namespaces_are_checked_when_the_block_is_made(namespace: str) -> None:
    with pytest.raises(ValidationError, match="namespace"):
        KubeflowTrainerCredentials(backend="local", namespace=namespace)
    with pytest.raises(ValidationError, match="namespace"):
        KubeflowTrainerCredentials(namespace=namespace)


def _train(lr: float = 0.1) -> float:
    return lr


def test_a_misspelt_decorator_argument_says_did_you_mean() -> None:
    with pytest.raises(SpecError, match=r"num_node.*Did you mean `num_nodes`"):
        trainjob_task(num_node=2)  # type: ignore[call-overload]
    with pytest.raises(SpecError, match=r"Did you mean `retries`"):
        trainjob_task(retires=2)  # type: ignore[call-overload]
    # Prefect's own task options still pass through.
    assert trainjob_task(retries=2, tags=["x"])(_train).retries == 2


@pytest.mark.parametrize(
    "kwargs",
    [
        {"env": {"HF_TOKEN": "hf_" + "x1" * 15}},
        {"packages_to_install": ["--index-url=http://evil/simple"]},
        {"pip_index_urls": ["evil/simple"]},
        {"resources_per_node": {"gpu": 0.5}},
    ],
    ids=["clear-token", "pip-option", "index-without-scheme", "gpu-fraction"],
)
def test_bad_trainer_settings_fail_when_decorating(kwargs: dict[str, Any]) -> None:
    with pytest.raises(SpecError) as info:
        trainjob_task(**kwargs)(_train)
    assert "Fix:" in str(info.value)
    assert "x1x1x1" not in str(info.value)


def test_namespace_and_timeouts_of_the_decorator_are_checked_when_decorating() -> None:
    with pytest.raises(SpecError, match="team-a"):
        trainjob_task(namespace="Team_A")
    with pytest.raises(SpecError, match="timeout"):
        trainjob_task(timeout="1h")
    with pytest.raises(SpecError, match="startup_timeout"):
        trainjob_task(startup_timeout=-1)
