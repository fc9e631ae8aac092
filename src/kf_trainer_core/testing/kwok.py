"""Pod behaviours of the real control plane's kwok nodes, chosen per job.

kwok's fake nodes run nothing: a pod of a Job goes Running, then Succeeded with no
termination message and no log (its node serves none). Annotations on the pod template
change that; a TrainJob sets them on its node pods through a ``RuntimePatch``. The test
bed honours :data:`TERMINATION_MESSAGE` too, so one test body runs on both servers.
"""

from __future__ import annotations

from collections.abc import Mapping

from kf_trainer_core.spec import RuntimePatch
from kf_trainer_core.testing.scenarios import KWOK_TERMINATION_MESSAGE_ANNOTATION

__all__ = ["DURATION", "TERMINATION_MESSAGE", "node_annotations", "termination_message"]

#: The pod succeeds with this ``state.terminated.message``.
TERMINATION_MESSAGE = KWOK_TERMINATION_MESSAGE_ANNOTATION
#: The pod stays Running this long (a Go duration, ``8s``) before it ends.
DURATION = "kwok.x-k8s.io/duration"


def node_annotations(annotations: Mapping[str, str], step: str = "node") -> RuntimePatch:
    """A ``RuntimePatch`` that puts ``annotations`` on the pod template of the runtime's
    replicated job ``step`` (``node``: the training nodes)."""
    pod = {"metadata": {"annotations": dict(annotations)}}
    jobs = [{"name": step, "template": {"spec": {"template": pod}}}]
    return RuntimePatch.model_validate(
        {"training_runtime_spec": {"template": {"spec": {"replicated_jobs": jobs}}}}
    )


def termination_message(text: str) -> RuntimePatch:
    """Node pods that succeed with ``text`` as their termination message (how the
    generated program hands a training function's return value back)."""
    return node_annotations({TERMINATION_MESSAGE: text})
