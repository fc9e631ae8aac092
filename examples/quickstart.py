"""The main job: prepare data → train as a TrainJob → evaluate → promote.

It runs on this machine with the local backend (no cluster), or on a cluster by
configuration only:

    uv run --frozen python examples/quickstart.py                 # local processes
    KF_TRAINER_BACKEND='{"backend": "kubernetes", "namespace": "team-a"}' \\
        uv run --frozen python examples/quickstart.py --data-dir /mnt/shared/data
    KF_TRAINER_BACKEND='{"backend": "container", "image": "team/train:1",
        "mounts": ["/srv/kf:/srv/kf"]}' uv run --frozen python examples/quickstart.py \\
        --workdir /srv/kf                                          # containers, same file

A rerun with the same day and nodes reuses that day's finished job (nothing trains
again); ``--fresh`` trains again. The jobs stay in ``.kf-trainer/quickstart/state``:

    uv run --frozen kf-trainer --backend local --state-dir .kf-trainer/quickstart/state jobs list

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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kf_trainer_core.base.hints import command, python_command
from kf_trainer_core.client import TrainerClient
from kf_trainer_core.config import LocalConfig
from kf_trainer_core.errors import SpecConflictError, TrainJobResultUnavailableError
from kf_trainer_core.spec import CustomTrainer, Labels, TrainJobSpec
from retraining_ml import (
    current_accuracy,
    evaluate,
    prepare_data,
    promote,
    promoted_note,
    train,
)


def backend(workdir: Path) -> dict[str, Any] | LocalConfig:
    """The backend from ``KF_TRAINER_BACKEND`` (JSON, as ``kf-trainer`` reads it; the
    client validates it), else local processes."""
    raw = os.environ.get("KF_TRAINER_BACKEND")
    if raw:
        data: dict[str, Any] = json.loads(raw)
        return data
    return LocalConfig(state_dir=str(workdir / "state"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n", 1)[0].replace("\n", " "),
        epilog="The jobs: kf-trainer --backend local --state-dir WORKDIR/state jobs list "
        "(in a clone: uv run --frozen kf-trainer …)",
    )
    parser.add_argument(
        "--workdir", default=".kf-trainer/quickstart", help="where data, models and job state go"
    )
    parser.add_argument(
        "--data-dir", help="shared storage for data and models (default: under --workdir)"
    )
    parser.add_argument(
        "--day", type=int, default=int(time.time() // 86400) % 365, help="which day's data"
    )
    parser.add_argument("--nodes", type=int, default=1, help="training nodes")
    parser.add_argument(
        "--fresh", action="store_true", help="train again even if this day was trained"
    )
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
    # The identity names what decides the job (day and nodes): a rerun with the same
    # arguments reuses the finished job, other arguments train a job of their own.
    identity = ("quickstart", args.day, f"nodes-{args.nodes}")
    if args.fresh:
        identity += (f"fresh-{time.time_ns()}",)
    try:
        outputs = client.run(
            spec,
            identity=identity,
            on_log=lambda line: print(f"    | {line}"),
            # What train() reports with kf_trainer_core.report, as it arrives.
            on_progress=lambda p: print(f"    > {'; '.join(p.summary())}"),
            timeout=1800,
        )
    except SpecConflictError as exc:
        # The training code changed since this day was trained: say how to go on.
        print(f"    {exc}", file=sys.stderr)
        again = ["--fresh", *(argv if argv is not None else sys.argv[1:])]
        print(f"    Fix: {python_command([sys.argv[0], *again])}", file=sys.stderr)
        return 2
    print(f"    job {outputs.name}: {outputs.status.value}, result {outputs.result}")
    print(f"    reported {outputs.metrics}; {outputs.cost_text()}")
    try:
        # The job succeeded, but its return value may not be readable (on a cluster
        # whose nodes serve no log, or a result over 4 KiB): say why, do not guess.
        result = outputs.require_result()
    except TrainJobResultUnavailableError as exc:
        print(f"    {exc}", file=sys.stderr)
        print(f"    see it: {command(client.config, ['jobs', 'get', outputs.name])}")
        return 1

    metrics = evaluate(result["model_uri"], data_dir)
    baseline = current_accuracy(registry, data_dir)
    print(f"3/4 evaluate: {metrics} ({promoted_note(registry, baseline)})")

    if metrics["accuracy"] > baseline:
        print(f"4/4 promote: {promote(result['model_uri'], metrics, registry)}")
    else:
        print("4/4 keep the promoted model: the candidate is not better")
    # A command that runs as printed, from here (uv run inside the clone).
    print(f"see it: {command(client.config, ['jobs', 'get', outputs.name])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
