"""Errors never quote a credential back (issue 24, defect 13): a malformed host, URI or
URL holding ``user:password@`` (or a token) is shown masked."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kf_trainer_core.config import KubernetesConfig
from kf_trainer_core.fields import checks
from kf_trainer_core.spec import HuggingFaceDatasetInitializer, S3ModelInitializer
from kf_trainer_core.spec.checkpoint_storage import Checkpoints
from kf_trainer_core.tasks.backend_fields import check_dashboard_url

SECRET = "PASSWORD-9f3a"


@pytest.mark.parametrize(
    "make",
    [
        lambda: KubernetesConfig(host=f"admin:{SECRET}@10.0.0.1:6443"),
        lambda: KubernetesConfig(host=f"https://admin:{SECRET}@10.0.0.1:port"),
        lambda: KubernetesConfig(host=f"https://admin:{SECRET}@10.0.0.1:6443", token="t" * 8),
        lambda: KubernetesConfig(host=f"ftp://admin:{SECRET}@10.0.0.1"),
        lambda: Checkpoints(uri=f"s3://admin:{SECRET}@bucket/x y"),
        lambda: S3ModelInitializer(storage_uri=f"gs://u:{SECRET}@bucket/m"),
        lambda: HuggingFaceDatasetInitializer(storage_uri=f"s3://u:{SECRET}@b/d"),
        lambda: check_dashboard_url(f"ftp://u:{SECRET}@dash/{{name}}"),
    ],
    ids=["no-scheme", "bad-port", "valid-with-password", "ftp", "ckpt", "s3", "hf", "dash"],
)
def test_a_credential_in_bad_input_is_never_quoted(make: Callable[[], Any]) -> None:
    with pytest.raises(ValueError) as info:
        make()
    assert SECRET not in str(info.value)


def test_shown_masks_and_keeps_the_rest() -> None:
    assert checks.shown(f"https://admin:{SECRET}@h:6443/x") == "'https://***@h:6443/x'"
    assert checks.shown("ghp_" + "a" * 36) == "'***'"
    assert checks.shown("https://host/x") == "'https://host/x'"
