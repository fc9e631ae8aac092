"""A broad table of valid specs, shared by the builder, schema and client tests."""

from __future__ import annotations

from train_functions import train_linear

from kf_trainer_core.spec import (
    ActiveDeadlineSeconds,
    Annotations,
    BuiltinTrainer,
    ContainerPatch,
    CustomTrainer,
    CustomTrainerContainer,
    DataCacheInitializer,
    DataFormat,
    DatasetInitializer,
    DataType,
    HuggingFaceDatasetInitializer,
    HuggingFaceModelInitializer,
    Initializer,
    JobSetSpecPatch,
    JobSetTemplatePatch,
    JobSpecPatch,
    JobTemplatePatch,
    Labels,
    LoraConfig,
    Loss,
    ManagedBy,
    ModelInitializer,
    Name,
    PodSpecPatch,
    PodTemplatePatch,
    QueueName,
    ReplicatedJobPatch,
    RuntimePatch,
    RuntimeRef,
    S3DatasetInitializer,
    S3ModelInitializer,
    SecretKeyRef,
    Suspend,
    TorchTuneConfig,
    TorchTuneInstructDataset,
    TrainerArgs,
    TrainerCommand,
    TrainingRuntimeSpecPatch,
    TrainJobSpec,
)


def pod_patch(rjob: str = "node", **pod: object) -> RuntimePatch:
    """A RuntimePatch touching the pods of one replicated job."""
    metadata = pod.pop("metadata", None)
    manager = str(pod.pop("manager", "kf-trainer-suite/patch"))
    return RuntimePatch(
        TrainingRuntimeSpecPatch(
            template=JobSetTemplatePatch(
                spec=JobSetSpecPatch(
                    replicated_jobs=[
                        ReplicatedJobPatch(
                            name=rjob,
                            template=JobTemplatePatch(
                                spec=JobSpecPatch(
                                    template=PodTemplatePatch(
                                        metadata=metadata,  # type: ignore[arg-type]
                                        spec=PodSpecPatch(**pod),  # type: ignore[arg-type]
                                    )
                                )
                            ),
                        )
                    ]
                )
            )
        ),
        manager=manager,
    )


SOURCE = """
def train(steps: int = 2):
    total = 0
    for i in range(steps):
        total += i
    return {"total": total}
"""


def valid_specs() -> dict[str, TrainJobSpec]:
    """Named specs covering every trainer, initializer and option."""
    return {
        "function-defaults": TrainJobSpec(trainer=CustomTrainer(train_linear)),
        "function-source": TrainJobSpec(trainer=CustomTrainer(SOURCE, func_args={"steps": 5})),
        "function-ref": TrainJobSpec(trainer=CustomTrainer("train_functions:train_linear")),
        "function-ref-not-embedded": TrainJobSpec(
            trainer=CustomTrainer({"ref": "mypkg.train:main", "embed": False})
        ),
        "function-full": TrainJobSpec(
            runtime="torch-distributed",
            trainer=CustomTrainer(
                train_linear,
                func_args={"lr": 0.05, "epochs": 2},
                image="pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime",
                packages_to_install=["numpy<3", "transformers[torch]>=4"],
                pip_index_urls=["https://pypi.org/simple", "https://download.pytorch.org/whl/cpu"],
                num_nodes=4,
                num_proc_per_node=8,
                resources_per_node={"gpu": 8, "cpu": 32, "memory": "256Gi", "storage": "100Gi"},
                env={"NCCL_DEBUG": "INFO", "WANDB_API_KEY": SecretKeyRef(name="wandb", key="key")},
            ),
            options=[
                Name("llm-finetune"),
                Labels({"team": "ml", "app.example.com/tier": "gold"}),
                Annotations({"description": "Nightly fine-tune, with free text."}),
                ActiveDeadlineSeconds(7200),
            ],
        ),
        "mig": TrainJobSpec(
            trainer=CustomTrainer(train_linear, resources_per_node={"mig-1g.5gb": 1})
        ),
        "fractional-cpu": TrainJobSpec(
            trainer=CustomTrainer(train_linear, resources_per_node={"cpu": 0.5, "memory": "512Mi"})
        ),
        "deepspeed-mpi": TrainJobSpec(
            runtime="deepspeed-distributed", trainer=CustomTrainer(train_linear, num_nodes=3)
        ),
        "jax": TrainJobSpec(runtime="jax-distributed", trainer=CustomTrainer(train_linear)),
        "container": TrainJobSpec(
            trainer=CustomTrainerContainer(
                "ghcr.io/example/train:1.0", num_nodes=2, resources_per_node={"gpu": 1}
            ),
            options=[
                TrainerCommand(["python", "-m", "train"]),
                TrainerArgs(["--epochs", "3", "--lr=$LR"]),
            ],
        ),
        "namespaced-runtime": TrainJobSpec(
            runtime=RuntimeRef(name="team-runtime", kind="TrainingRuntime"),
            trainer=CustomTrainerContainer("ghcr.io/example/train:1.0"),
        ),
        "torchtune": TrainJobSpec(
            runtime="torchtune-llama3.2-1b",
            trainer=BuiltinTrainer(
                TorchTuneConfig(
                    dtype=DataType.BF16,
                    batch_size=4,
                    epochs=1,
                    loss=Loss.CEWithChunkedOutputLoss,
                    num_nodes=2,
                    resources_per_node={"gpu": 1},
                    peft_config=LoraConfig(lora_rank=8, lora_alpha=16, lora_dropout=0.1),
                    dataset_preprocess_config=TorchTuneInstructDataset(
                        source=DataFormat.JSON,
                        split="train[:10%]",
                        train_on_input=False,
                        new_system_prompt="You are helpful.",
                        column_map={"input": "question", "output": "answer"},
                    ),
                )
            ),
            initializer=Initializer(
                dataset=HuggingFaceDatasetInitializer(storage_uri="hf://tatsu-lab/alpaca/data"),
                model=HuggingFaceModelInitializer(
                    storage_uri="hf://meta-llama/Llama-3.2-1B-Instruct", secret_ref="hf-token"
                ),
            ),
        ),
        "s3-initializers": TrainJobSpec(
            runtime="torchtune-qwen2.5-1.5b",
            trainer=BuiltinTrainer(TorchTuneConfig(epochs=2)),
            initializer=Initializer(
                dataset=S3DatasetInitializer(
                    storage_uri="s3://bucket/datasets/alpaca",
                    endpoint="https://minio.example.com",
                    region="eu-west-1",
                    secret_ref="s3-creds",
                    ignore_patterns=["*.tmp"],
                ),
                model=S3ModelInitializer(
                    storage_uri="s3://bucket/models/qwen", role_arn="arn:aws:iam::1:role/r"
                ),
            ),
        ),
        "data-cache": TrainJobSpec(
            runtime="torch-distributed-with-cache",
            trainer=CustomTrainer(train_linear),
            initializer=Initializer(
                dataset=DataCacheInitializer(
                    storage_uri="cache://analytics/events",
                    metadata_loc="s3://warehouse/events/metadata.json",
                    num_data_nodes=3,
                    head_cpu="1",
                    worker_mem="4Gi",
                )
            ),
        ),
        "generic-initializers": TrainJobSpec(
            runtime="my-runtime",
            trainer=CustomTrainer(train_linear),
            initializer=Initializer(
                dataset=DatasetInitializer(
                    storage_uri="file:///data/train", env={"SPLIT": "train"}
                ),
                model=ModelInitializer(storage_uri="file:///models/base"),
            ),
        ),
        "kueue": TrainJobSpec(
            trainer=CustomTrainer(train_linear), options=[QueueName("team-a"), Suspend()]
        ),
        "multikueue": TrainJobSpec(
            trainer=CustomTrainer(train_linear), options=[ManagedBy("kueue.x-k8s.io/multikueue")]
        ),
        "runtime-patches": TrainJobSpec(
            trainer=CustomTrainer(train_linear),
            options=[
                pod_patch(
                    metadata={"labels": {"cost-center": "42"}, "annotations": {"a": "b"}},
                    node_selector={"gpu.example.com/model": "h100"},
                    tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
                    service_account_name="trainer",
                    volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
                    containers=[
                        ContainerPatch(
                            name="node",
                            volume_mounts=[{"name": "data", "mountPath": "/data"}],
                            security_context={"runAsNonRoot": True},
                        ),
                    ],
                    image_pull_secrets=[{"name": "regcred"}],
                    scheduling_gates=[{"name": "example.com/gate"}],
                    termination_grace_period_seconds=60,
                ),
                pod_patch(manager="example.com/scheduler", affinity={"nodeAffinity": {}}),
            ],
        ),
        "no-trainer": TrainJobSpec(runtime="torch-distributed"),
    }
