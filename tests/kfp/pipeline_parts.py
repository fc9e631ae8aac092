"""Training functions and ordinary KFP components for the pipeline tests, in a real
file so that KFP and the suite can read their source."""

# No `from __future__ import annotations`: KFP reads component annotations as objects.
from kfp import dsl
from kfp.dsl import Input, Metrics, Model

LOCAL = {"base_image": "python:3.11", "install_kfp_package": False}


def train_model(data_uri: str, lr: float = 0.1, epochs: int = 2) -> dict:
    """Fit a line to the data set (a stand-in for real training)."""
    import json

    w = 0.0
    for _ in range(epochs * 20):
        w += lr * (3.0 - w)
    print(json.dumps({"event": "trained", "data": data_uri, "w": round(w, 4)}))
    return {
        "model_uri": data_uri.replace("datasets", "models") + "/model",
        "loss": round((3.0 - w) ** 2, 6),
        "metrics": {"w": round(w, 4)},
    }


@dsl.component(**LOCAL)
def prepare_data(rows: int) -> str:
    """Write a data set; return where it is."""
    return f"s3://bucket/datasets/rows-{rows}"


@dsl.component(**LOCAL)
def evaluate(model: Input[Model], metrics: Input[Metrics], result_json: str) -> str:
    """Read what the training reported."""
    import json

    result = json.loads(result_json)
    return json.dumps(
        {
            "model_uri": model.uri,
            "trainjob": model.metadata.get("trainjob"),
            "loss_metric": metrics.metadata.get("loss"),
            "w_metric": metrics.metadata.get("w"),
            "loss_result": result["loss"],
        },
        sort_keys=True,
    )
