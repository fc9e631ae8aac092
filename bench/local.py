"""Local backend: end-to-end time of a trivial job, from the client's construction to
``wait`` returning — ours (``TrainerClient(LocalConfig(state_dir=...))``) against the
Kubeflow SDK's ``LocalProcessBackendConfig``; and ours on the container backend
(``ContainerConfig``: the job's pod a container of a Docker engine) against ours local.

The container run needs an engine and the test image of ``.ci/container-setup.sh``
(``$KF_TRAINER_TEST_IMAGE``, else the newest ``kf-trainer-test`` image); it runs the
function with the ``jax-distributed`` runtime, whose launcher is plain ``python`` as
the local run's is (the project's venv has no torch), so the two differ only by the
container. The Kubeflow SDK's ``ContainerBackendConfig`` is not run: it connects its
containers through a bridge network, which this machine does not allow (only loopback
traffic).

The SDK's local backend builds a virtual environment per job, bootstraps pip into it,
installs the runtime's packages (``torch``; we ask for ``torch==2.13.0``, which pip
finds among this machine's wheels through ``PIP_FIND_LINKS``) and starts the function
under ``torchrun``; its install time is reported apart, from the time stamps of its log
lines. The SDK's run is skipped in quick mode (it takes a minute or more).
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from pathlib import Path

from bench.common import (
    JSON,
    BenchServer,
    DriverError,
    Settings,
    driver,
    median,
    ratio,
    sdk_python,
    sdk_unavailable_reason,
)

TORCH = "torch==2.13.0"
#: A runtime whose launcher is ``python`` (no torch import in the container).
CONTAINER_RUNTIME = "jax-distributed"

WHEELS = Path("/opt/wheels")


def ours_available() -> str | None:
    """None when the local backend exists, else why it is skipped."""
    try:
        spec = importlib.util.find_spec("kf_trainer_core.backends.local")
    except ModuleNotFoundError:
        spec = None
    if spec is None or spec.origin is None:
        return "kf_trainer_core.backends.local is not there yet (a package without __init__.py)"
    try:
        module = importlib.import_module("kf_trainer_core.backends.local")
    except Exception as exc:
        return f"kf_trainer_core.backends.local does not import: {exc!r}"
    if not hasattr(module, "LocalTransport"):
        return "kf_trainer_core.backends.local has no LocalTransport yet"
    return None


def container_image() -> tuple[str | None, str]:
    """The test image in a running engine, or ``None`` and why not."""
    try:
        from kf_trainer_core.backends.local.container.engine import connect

        client = connect().client
    except Exception as exc:
        return None, f"no container engine ({str(exc)[:200]})"
    try:
        named = os.environ.get("KF_TRAINER_TEST_IMAGE")
        if named:
            return named, ""
        images = sorted(
            client.images.list(name="kf-trainer-test"),
            key=lambda i: str(i.attrs.get("Created", "")),
        )
        tags = [t for i in images[-1:] for t in i.tags]
        if not tags:
            return None, "no kf-trainer-test image (run .ci/container-setup.sh start)"
        return str(tags[0]), ""
    finally:
        client.close()


def _container(settings: Settings, workdir: Path) -> JSON:
    image, why = container_image()
    if image is None:
        return {"skipped": why}
    runs = 1 if settings.quick else 3
    samples: list[float] = []
    returned = None
    for i in range(runs):
        settings.note(f"local: ours on the container backend, run {i + 1}/{runs}")
        config = {
            "state_dir": tempfile.mkdtemp(prefix="container-state-", dir=workdir),
            "timeout": 300,
            "runtime": CONTAINER_RUNTIME,
            "container": {"image": image, "pull_policy": "Never"},
        }
        try:
            with driver("ours", "local", config, workdir, settings) as d:
                result = d.result(timeout=360)
        except DriverError as exc:
            return {"error": str(exc), "image": image}
        if result["status"] != "Complete":
            return {"error": result.get("error") or result["status"], "image": image}
        samples.append(result["seconds"])
        returned = result["result"]
    return {"seconds": median(samples), "samples": samples, "result": returned, "image": image}


def run(settings: Settings, workdir: Path, srv: BenchServer | None = None) -> JSON:
    """Measure ours (several runs, median) and, in the full run, the SDK once."""
    del srv  # the local backends need no cluster
    out: JSON = {"ours": {}, "sdk": {}}
    reason = ours_available()
    if reason is not None:
        out["ours"] = {"skipped": reason}
    else:
        runs = 1 if settings.quick else 3
        samples: list[float] = []
        returned = None
        for i in range(runs):
            settings.note(f"local: ours, run {i + 1}/{runs}")
            state_dir = tempfile.mkdtemp(prefix="local-state-", dir=workdir)
            config = {"state_dir": state_dir, "timeout": 300}
            try:
                with driver("ours", "local", config, workdir, settings) as d:
                    result = d.result(timeout=360)
            except DriverError as exc:
                out["ours"] = {"error": str(exc)}
                break
            if result["status"] != "Complete":
                out["ours"] = {"error": result.get("error") or result["status"]}
                break
            samples.append(result["seconds"])
            returned = result["result"]
        if samples:
            out["ours"] = {"seconds": median(samples), "samples": samples, "result": returned}
    if settings.quick:
        out["sdk"] = {"skipped": "quick mode (the SDK builds a venv and installs torch per job)"}
    elif sdk_python(settings) is None:
        out["sdk"] = {"skipped": sdk_unavailable_reason()}
    else:
        settings.note(f"local: Kubeflow SDK LocalProcessBackend (venv + pip install {TORCH})")
        env = dict(os.environ)
        if WHEELS.is_dir():
            env["PIP_FIND_LINKS"] = str(WHEELS)
        config = {"packages": [TORCH], "timeout": 1200}
        try:
            with driver("sdk", "local", config, workdir, settings, env=env) as d:
                result = d.result(timeout=1300)
            out["sdk"] = result
        except DriverError as exc:
            out["sdk"] = {"error": str(exc)}
    out["container"] = _container(settings, workdir)
    ours_s = out["ours"].get("seconds")
    out["container_ratio"] = ratio(out["container"].get("seconds"), ours_s)
    sdk_s = out["sdk"].get("seconds") if out["sdk"].get("status") == "Complete" else None
    out["ratio"] = ratio(sdk_s, ours_s)
    install = out["sdk"].get("install_seconds")
    out["ratio_without_install"] = ratio(sdk_s - install, ours_s) if sdk_s and install else None
    return out
