"""The local backend: the same TrainJob specs and the same client API, executed as
processes on this machine, so a DAG, a flow or a pipeline runs end to end on a laptop.

>>> client = TrainerClient(LocalConfig(state_dir="/tmp/kf"))
>>> name = client.train(trainer=CustomTrainer(train, num_nodes=2))
>>> client.wait(name)                      # the same waits, logs, events and outputs

How it is built
---------------
* **State** lives in a directory (``LocalConfig.state_dir``, default
  ``$KF_TRAINER_STATE_DIR`` or ``~/.kf-trainer/local``), not in memory: any process
  can watch, read logs, cancel or reattach — an Airflow worker submits and a triggerer
  watches; a Prefect task submits and a later one waits. Objects (TrainJobs, pods,
  events) sit in SQLite with one global ``resourceVersion`` and a change log that
  watches poll (:mod:`~kf_trainer_core.backends.local.store`); logs are files of timestamped
  lines (:mod:`~kf_trainer_core.backends.local.logs`).
* **The client's calls** are answered by :class:`LocalTransport` /
  :class:`AsyncLocalTransport` (:mod:`~kf_trainer_core.backends.local.api`) as an apiserver
  would: Status errors, 409 on a taken name, watches with bookmarks and 410.
* **Each job** runs under a detached supervisor process
  (``python -m kf_trainer_core.backends.local.supervisor``, its own session) that outlives the
  submitter: initializers, then ``num_nodes`` x ``num_proc_per_node`` processes with
  the environment a real node sees, pods with container states and termination
  messages, the Trainer's conditions and Events (:mod:`~kf_trainer_core.backends.local.supervisor`).

The workspace
-------------
A cluster mounts the job's volume at ``/workspace``: initializers fill
``/workspace/dataset`` and ``/workspace/model``. Locally the job gets a directory of its
own with the same layout (``<state_dir>/workspaces/<namespace>/<job>-<uid8>/``), passed
to every process as ``$KF_TRAINER_WORKSPACE``. String values of ``func_args`` that are
``/workspace`` paths are rewritten to it, so ``func_args={"data": "/workspace/dataset"}``
works on both. In code, resolve paths portably with::

    root = os.environ.get("KF_TRAINER_WORKSPACE", "/workspace")

Processes run in the submitter's working directory; ``file://`` and plain local paths
of initializers are copied (relative ones from that directory).

Limits: POSIX only (process groups, ``flock``); a ``BuiltinTrainer`` (TorchTune
recipes) needs a cluster and is refused at submit; container images are not used
(commands run on this machine, said by a Warning event and a log line) — the container
backend (``ContainerConfig``, :mod:`kf_trainer_core.backends.local.container`) runs the same jobs in
their images, with this package's state, API and supervisors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kf_trainer_core.backends.local._common import WORKSPACE_ENV
from kf_trainer_core.base.quoting import shown

if TYPE_CHECKING:
    from kf_trainer_core.backends.local.transport import AsyncLocalTransport, LocalTransport

__all__ = [
    "WORKSPACE_ENV",
    "AsyncLocalTransport",
    "LocalTransport",
    "install_runtime",
    "workspace_of",
]


def __getattr__(name: str) -> Any:
    # The transports pull in the client's call types; the supervisor, which imports
    # this package on every job start, must not pay for them.
    if name in ("LocalTransport", "AsyncLocalTransport"):
        from kf_trainer_core.backends.local import transport

        return getattr(transport, name)
    raise AttributeError(f"module {shown(__name__)} has no attribute {shown(name)}")


def install_runtime(config: Any, manifest: dict[str, Any]) -> dict[str, Any]:
    """Create (or replace) a ClusterTrainingRuntime / TrainingRuntime in the local
    store from its manifest — the same YAML a cluster gets — for jobs that need a
    runtime other than the defaults (e.g. one with both initializer steps)."""
    from kf_trainer_core.backends.local.store import (
        CLUSTER_TRAINING_RUNTIMES,
        TRAINING_RUNTIMES,
        Store,
    )

    kind = (
        TRAINING_RUNTIMES
        if manifest.get("kind") == "TrainingRuntime"
        else CLUSTER_TRAINING_RUNTIMES
    )
    obj = dict(manifest)
    meta = dict(obj.get("metadata") or {})
    if kind is TRAINING_RUNTIMES:
        meta.setdefault("namespace", getattr(config, "namespace", "local"))
    else:
        meta.pop("namespace", None)
    obj["metadata"] = meta
    from kf_trainer_core.backends.local._common import Paths

    store = Store(Paths(config.state_path()).db)
    try:
        with store.write() as tx:
            existing = tx.get(kind, meta.get("namespace"), str(meta["name"]))
            if existing is None:
                return tx.create(kind, obj)
            meta.update({k: existing["metadata"][k] for k in ("uid", "creationTimestamp")})
            return tx.put(kind, obj)
    finally:
        store.close()


def workspace_of(config: Any, namespace: str, name: str, uid: str) -> str:
    """The local directory that stands for ``/workspace`` of a job."""
    from kf_trainer_core.backends.local._common import Paths

    return str(Paths(config.state_path()).workspace(namespace, name, uid))
