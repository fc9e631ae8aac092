"""Admission of a TrainJob on the container backend: what the local API checks before it
stores the job (an image to run, an engine that answers, resources), and the plan entry
its supervisor's :class:`~kf_trainer_core.backends.local.container.runner.ContainerRunner` reads."""

from __future__ import annotations

from typing import Any

from kf_trainer_core.backends.local.container.engine import EngineUnavailable, connect

JSON = dict[str, Any]


def admit(
    settings: JSON,
    plan: JSON,
    *,
    runtime_name: str,
    node: JSON,
    trainer: JSON,
    causes: list[tuple[str, str, str]],
) -> None:
    """Fill ``plan["container"]`` and append 422 ``causes`` (the resources are the
    caller's to admit)."""
    image = settings.get("image") or trainer.get("image") or node.get("image")
    if not image:
        causes.append(
            (
                # "backend.": a problem of the backend's configuration (the client
                # reports it as such: BackendConfigRejectedError).
                "backend.image",
                "FieldValueRequired",
                "Required value: the container backend runs the trainer in an image, and "
                f"neither the TrainJob nor runtime {runtime_name!r} names one. Fix: set "
                "the backend configuration's \"image\" (the key of $KF_TRAINER_BACKEND's "
                "JSON, a connection's extra or a block; ContainerConfig(image=...) in "
                "Python), or the trainer's image (CustomTrainer's TrainerImage option, "
                "CustomTrainerContainer(image=...)).",
            )
        )
    try:
        engine = connect(str(settings.get("engine") or "auto"), settings.get("host"))
    except EngineUnavailable as exc:
        causes.append(("backend.host", "FieldValueForbidden", f"Forbidden: {exc}"))
    else:
        engine.client.close()
    plan["container"] = {
        **settings,
        "trainer_image": str(image or ""),
        "runtime_args": list(node.get("args") or []),
    }
