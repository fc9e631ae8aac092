"""The main job: prepare data → train as a TrainJob → evaluate → promote, on this
machine with the local backend (no cluster), or on a cluster by configuration only.

    uv run --frozen python examples/quickstart.py                 # local processes
    KF_TRAINER_BACKEND='{"backend": "kubernetes", "namespace": "team-a"}' \\
        uv run --frozen python examples/quickstart.py --data-dir /mnt/shared/data

The training function and the rest of the ML live in ``retraining_ml.py``; this file is
only the workflow, written with the core client that every orchestrator adapter uses.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.config import KubernetesConfig, LocalConfig
from kf_trainer_core.spec import CustomTrainer, Labels, TrainJobSpec
from retraining_ml import current_accuracy, evaluate, prepare_data, promote, train


def backend(workdir: Path) -> KubernetesConfig | LocalConfig:
    """The backend from ``KF_TRAINER_BACKEND`` (JSON), else local processes."""
    raw = os.environ.get("KF_TRAINER_BACKEND")
    if raw:
        data = json.loads(raw)
        return (
            LocalConfig.parse(data)
            if data.get("backend") == "local"
            else KubernetesConfig.parse(data)
        )
    return LocalConfig(state_dir=str(workdir / "state"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--workdir", default=".kf-trainer/quickstart", help="where data, models and job state go"
    )
    parser.add_argument(
        "--data-dir", help="shared storage for data and models (default: under --workdir)"
    )
    parser.add_argument(
        "--day", type=int, default=int(time.time() // 86400) % 365, help="which day's data"
    )
    parser.add_argument("--nodes", type=int, default=1)
    args = parser.parse_args(argv)

    workdir = Path(args.workdir).resolve()
    shared = Path(args.data_dir).resolve() if args.data_dir else workdir
    data_dir = str(shared / "data" / f"day-{args.day}")
    model_dir = str(shared / "models" / f"day-{args.day}")
    registry = str(shared / "registry")

    print(f"1/4 prepare: {prepare_data(data_dir, args.day)}")

    spec = TrainJobSpec(
        runtime="torch-distributed",
        trainer=CustomTrainer(
            train,
            func_args={"data_dir": data_dir, "model_dir": model_dir, "lr": 0.5, "epochs": 30},
            num_nodes=args.nodes,
        ),
        options=[Labels({"app.kubernetes.io/part-of": "quickstart"})],
    )
    client = TrainerClient(backend(workdir))
    print(f"2/4 train on {client.config.backend} backend, namespace {client.namespace}")
    outputs = client.run(
        spec,
        identity=("quickstart", args.day),
        on_log=lambda line: print(f"    | {line}"),
        # What train() reports with kf_trainer_core.report, as it arrives.
        on_progress=lambda p: print(f"    > {'; '.join(p.summary())}"),
        timeout=1800,
    )
    print(f"    job {outputs.name}: {outputs.status.value}, result {outputs.result}")
    print(f"    reported {outputs.metrics}; {outputs.cost_text()}")

    metrics = evaluate(outputs.result["model_uri"], data_dir)
    baseline = current_accuracy(registry, data_dir)
    print(f"3/4 evaluate: {metrics} (promoted model: accuracy {baseline})")

    if metrics["accuracy"] > baseline:
        print(f"4/4 promote: {promote(outputs.result['model_uri'], metrics, registry)}")
    else:
        print("4/4 keep the promoted model: the candidate is not better")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
