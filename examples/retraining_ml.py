"""The machine learning of the retraining examples, shared by the Airflow DAG, the
Prefect flow and the Kubeflow pipeline: prepare data, train (as a TrainJob), evaluate,
promote.

A small logistic regression on a generated data set whose decision boundary drifts a
little every day, so retraining matters: a model trained on today's data beats
yesterday's on today's test set, and the promotion step has something to decide.

``train`` runs inside the TrainJob, so it is self-contained: imports inside, inputs
through its arguments. It uses PyTorch (with data-parallel gradient averaging over gloo
when a job has several processes) when torch is installed, and NumPy otherwise.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import random
import shutil
from pathlib import Path
from typing import Any

FEATURES = 4
#: Days are counted from this date; the drift repeats every year.
EPOCH = dt.date(1970, 1, 1)


def _boundary(day: int) -> list[float]:
    # The true weights drift slowly with the day: yesterday's model ages.
    return [math.cos(0.3 * day + i) * (1.5 + 0.5 * i) for i in range(FEATURES)]


def day_of(when: dt.date | dt.datetime | None = None) -> int:
    """The day number of ``when`` (default: today, in UTC): what a scheduled run
    trains on. The quickstart's default ``--day`` is the same number."""
    if when is None:
        when = dt.datetime.now(dt.timezone.utc)
    if isinstance(when, dt.datetime):
        when = when.astimezone(dt.timezone.utc).date() if when.tzinfo else when.date()
    return (when - EPOCH).days % 365


def layout(shared_dir: str, day: int) -> dict[str, str]:
    """Where a day's files go under ``shared_dir``, as absolute paths (the training
    processes do not share the caller's working directory): ``data_dir``,
    ``model_dir`` (the candidate) and ``registry`` (the promoted model)."""
    root = Path(shared_dir).expanduser().resolve()
    return {
        "data_dir": str(root / "data" / f"day-{day}"),
        "model_dir": str(root / "models" / f"day-{day}"),
        "registry": str(root / "registry"),
    }


def prepare_data(data_dir: str, day: int = 0, rows: int = 2000) -> dict[str, Any]:
    """Write ``train.csv`` and ``test.csv`` for ``day`` under ``data_dir``."""
    rng = random.Random(day)
    weights = _boundary(day)
    out = Path(data_dir)
    out.mkdir(parents=True, exist_ok=True)
    for split, count in (("train", rows), ("test", rows // 4)):
        lines = []
        for _ in range(count):
            x = [rng.gauss(0, 1) for _ in range(FEATURES)]
            margin = sum(w * v for w, v in zip(weights, x, strict=True)) + rng.gauss(0, 0.5)
            lines.append(",".join(f"{v:.5f}" for v in x) + f",{int(margin > 0)}")
        (out / f"{split}.csv").write_text("\n".join(lines) + "\n")
    return {"data_dir": str(out), "day": day, "rows": rows}


def train(data_dir: str, model_dir: str, lr: float = 0.5, epochs: int = 30) -> dict[str, Any]:
    """Fit a logistic regression on ``data_dir/train.csv``; rank 0 saves it to
    ``model_dir/model.json``. Runs on every node of the TrainJob."""
    import json
    import os
    from pathlib import Path

    # Every attempt of this run (a retry after a lost node) shares one checkpoint
    # directory: resume from its last checkpoint instead of starting over.
    from kf_trainer_core.checkpoints import latest, load_json, save_json, step_of

    # Progress and loss reach every orchestrator (status server, or the node's log);
    # rank 0 reports, other ranks' calls do nothing.
    from kf_trainer_core.report import report, track

    rows = [line.split(",") for line in Path(data_dir, "train.csv").read_text().split()]
    xs = [[float(v) for v in row[:-1]] for row in rows]
    ys = [float(row[-1]) for row in rows]
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    # Each rank trains on its shard; gradients are averaged when torch can do it.
    shard = slice(rank, None, world)
    xs, ys = xs[shard], ys[shard]
    last = latest()
    start = step_of(last) + 1 if last else 0
    state = load_json(last) if last else {"w": [0.0] * len(xs[0]), "b": 0.0}
    if last and rank == 0:
        print(f"resuming at epoch {start} from {last.name}", flush=True)
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        torch = None  # type: ignore[assignment]

    if torch is not None:
        distributed = world > 1 and dist.is_available()
        if distributed and not dist.is_initialized():
            dist.init_process_group("gloo")
        x = torch.tensor(xs)
        y = torch.tensor(ys)
        w = torch.tensor(state["w"], requires_grad=True)
        b = torch.tensor([state["b"]], requires_grad=True)
        for epoch in track(range(start, epochs)):
            loss = torch.nn.functional.binary_cross_entropy_with_logits(x @ w + b, y)
            grads = torch.autograd.grad(loss, [w, b])
            if distributed:
                for g in grads:
                    dist.all_reduce(g)
                    g /= world
            with torch.no_grad():
                w -= lr * grads[0]
                b -= lr * grads[1]
            report(metrics={"loss": round(loss.item(), 5), "epoch": epoch + 1})
            if epoch % 10 == 9:  # rank 0 writes it, atomically
                save_json(epoch, {"w": w.tolist(), "b": float(b.item())}, keep=2)
            if rank == 0 and epoch % 10 == 0:
                print(f"epoch {epoch}: loss={loss.item():.4f}", flush=True)
        with torch.no_grad():
            logits = x @ w + b
            final = float(torch.nn.functional.binary_cross_entropy_with_logits(logits, y))
        weights, bias = w.detach().tolist(), float(b.item())
        if distributed:
            dist.destroy_process_group()
    else:
        import numpy as np

        x = np.array(xs)
        y = np.array(ys)
        w = np.array(state["w"])
        b = float(state["b"])
        for epoch in track(range(start, epochs)):
            p = 1 / (1 + np.exp(-(x @ w + b)))
            w -= lr * x.T @ (p - y) / len(y)
            b -= lr * float(np.mean(p - y))
            loss = -np.mean(y * np.log(p + 1e-9) + (1 - y) * np.log(1 - p + 1e-9))
            report(metrics={"loss": round(float(loss), 5), "epoch": epoch + 1})
            if epoch % 10 == 9:
                save_json(epoch, {"w": w.tolist(), "b": b}, keep=2)
            if rank == 0 and epoch % 10 == 0:
                print(f"epoch {epoch}: loss={loss:.4f}", flush=True)
        p = 1 / (1 + np.exp(-(x @ w + b)))
        final = float(-np.mean(y * np.log(p + 1e-9) + (1 - y) * np.log(1 - p + 1e-9)))
        weights, bias = w.tolist(), b
    model_uri = str(Path(model_dir, "model.json"))
    if rank == 0:
        Path(model_dir).mkdir(parents=True, exist_ok=True)
        Path(model_uri).write_text(json.dumps({"weights": weights, "bias": bias}))
    return {"model_uri": model_uri, "train_loss": round(final, 5), "ranks": world}


def evaluate(model_uri: str, data_dir: str) -> dict[str, float]:
    """Accuracy and log-loss of a saved model on ``data_dir/test.csv``."""
    model = json.loads(Path(model_uri).read_text())
    rows = [line.split(",") for line in Path(data_dir, "test.csv").read_text().split()]
    correct, loss = 0, 0.0
    for row in rows:
        x = [float(v) for v in row[:-1]]
        y = int(row[-1])
        z = sum(w * v for w, v in zip(model["weights"], x, strict=True)) + model["bias"]
        p = 1 / (1 + math.exp(-max(-30.0, min(30.0, z))))
        correct += int((p > 0.5) == bool(y))
        loss -= math.log(p if y else 1 - p + 1e-12) if 0 < p < 1 else 0.0
    return {"accuracy": round(correct / len(rows), 4), "loss": round(loss / len(rows), 4)}


def current_accuracy(registry_dir: str, data_dir: str) -> float:
    """How the promoted model does on today's test set (0 when there is none)."""
    promoted = Path(registry_dir, "model.json")
    if not promoted.exists():
        return 0.0
    return evaluate(str(promoted), data_dir)["accuracy"]


def promoted_note(registry_dir: str, accuracy: float) -> str:
    """How the evaluation names the promoted model: its accuracy, or that there is none
    yet (a first run compares with 0 and promotes)."""
    if not Path(registry_dir, "model.json").exists():
        return "promoted model: none yet"
    return f"promoted model: accuracy {accuracy}"


def promote(model_uri: str, metrics: dict[str, Any], registry_dir: str) -> dict[str, Any]:
    """Copy the candidate into the registry, with its metrics."""
    registry = Path(registry_dir)
    registry.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(model_uri, registry / "model.json")
    (registry / "metrics.json").write_text(json.dumps(metrics, sort_keys=True))
    return {"promoted": str(registry / "model.json"), **metrics}


def summary(
    promoted: bool, registry_dir: str, job: str | None = None, state_dir: str | None = None
) -> str:
    """The closing lines of an example run, after the orchestrator's own logging:
    promoted or not, where the promoted model is and its metrics, and how to look at the
    TrainJob (``state_dir``: the local backend's, for ``kf-trainer``)."""
    registry = Path(registry_dir)
    metrics_file = registry / "metrics.json"
    metrics = json.loads(metrics_file.read_text()) if metrics_file.exists() else None
    head = "promoted the candidate" if promoted else "kept the promoted model"
    lines = ["", f"Summary: {head}"]
    if metrics is not None:
        shown = ", ".join(f"{k}={v}" for k, v in sorted(metrics.items()))
        lines.append(f"  model:   {registry / 'model.json'} ({shown})")
    else:
        lines.append("  model:   none promoted yet")
    if job:
        lines.append(f"  TrainJob {job}")
        if state_dir:
            from kf_trainer_core.base.hints import command
            from kf_trainer_core.config import LocalConfig

            # Runs as printed from here (`uv run --frozen kf-trainer` in the clone).
            look = command(LocalConfig(state_dir=state_dir), ["jobs", "get", job])
            lines.append(f"  see it:  {look}")
    return "\n".join(lines)
