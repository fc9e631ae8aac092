"""A pipeline's training component on the container backend
(``backend_config={"backend": "container", ...}``): the job's pod is a container of this
machine's engine. Skips where no engine or test image exists."""

# No `from __future__ import annotations`: KFP reads pipeline annotations as objects.
import json
from pathlib import Path

from kfp import dsl
from pipeline_parts import evaluate, prepare_data, train_model

from container_support import assert_nothing_left, engine_or_skip, image_or_skip
from kf_trainer_core.client import TrainerClient
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.config import ContainerConfig
from kf_trainer_kfp import ComponentImage, trainjob_component

HERE = ComponentImage.current_environment()


def test_component_on_the_container_backend(local_kfp: Path, tmp_path: Path) -> None:
    engine = engine_or_skip()
    backend = {
        "backend": "container",
        "state_dir": str(tmp_path / "state"),
        "image": image_or_skip(engine),
        "pull_policy": "Never",
    }
    train = trainjob_component(
        train_model, runtime="jax-distributed", backend_config=backend, component_image=HERE
    )

    @dsl.pipeline
    def pipe() -> str:
        data = prepare_data(rows=7)
        trained = train(data_uri=data.output, lr=0.5, epochs=1)
        return evaluate(
            model=trained.outputs["model"],
            metrics=trained.outputs["metrics"],
            result_json=trained.outputs["result_json"],
        ).output

    seen = json.loads(pipe().output)
    assert seen["model_uri"] == "s3://bucket/models/rows-7/model"
    assert seen["loss_metric"] == seen["loss_result"]
    with TrainerClient(backend) as client:
        assert isinstance(client.config, ContainerConfig)
        [job] = client.list_jobs()
        assert job.status is JobState.COMPLETE
        client.delete_job(job.name)
    assert_nothing_left(engine, [str(job.uid)])
