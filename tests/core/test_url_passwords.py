"""A password inside a URL is refused in every field that reaches the manifest, as a
``storage_uri`` of that shape is (issue 24, defect 12), and never quoted back."""

from __future__ import annotations

from typing import Any

import pytest

from kf_trainer_core.errors import SpecError
from kf_trainer_core.spec import (
    CustomTrainer,
    HuggingFaceDatasetInitializer,
    TrainerArgs,
    TrainJobSpec,
)

FUNC = "def train(**kw):\n    return 1\n"
SECRET = "PASSWORD-9f3a"


@pytest.mark.parametrize(
    "make",
    [
        lambda: CustomTrainer(FUNC, env={"DB": f"postgresql://admin:{SECRET}@db:5432/x"}),
        lambda: CustomTrainer(
            FUNC, packages_to_install=[f"pkg @ https://user:{SECRET}@host/x.whl"]
        ),
        lambda: CustomTrainer(FUNC, pip_index_urls=[f"https://user:{SECRET}@host/simple"]),
        lambda: CustomTrainer(FUNC, func_args={"db": f"mysql://root:{SECRET}@db/x"}),
        lambda: HuggingFaceDatasetInitializer(
            storage_uri="hf://org/data", env={"MIRROR": f"https://u:{SECRET}@mirror/"}
        ),
        lambda: TrainJobSpec(
            trainer=CustomTrainer(FUNC), options=[TrainerArgs(args=[f"--db=redis://:{SECRET}@r"])]
        ),
        lambda: HuggingFaceDatasetInitializer(storage_uri=f"hf://u:{SECRET}@org/data"),
    ],
    ids=["env", "requirement", "index-url", "func-args", "init-env", "args", "storage-uri"],
)
def test_a_password_inside_a_url_is_refused_everywhere(make: Any) -> None:
    with pytest.raises(SpecError) as info:
        make()
    assert SECRET not in str(info.value)
    assert "password" in str(info.value).lower()


def test_urls_without_a_password_pass() -> None:
    CustomTrainer(
        FUNC,
        env={"DB": "postgresql://admin@db:5432/x", "SITE": "https://example.com/a:b@c"},
        packages_to_install=["pkg @ https://host/x.whl"],
        pip_index_urls=["https://host/simple"],
    )
