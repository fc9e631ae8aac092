"""Label selectors for finding TrainJobs again: every attempt submitted for one
orchestrator identity, or every job an orchestrator run labelled as its own.

(The selector grammar itself, parsed and matched, is :mod:`kf_trainer_core.k8s.selectors`.)

Orchestrator adapters use these when they must act on jobs whose names they may not
know — a task interrupted between submitting and learning the name, or a flow run
cancelled from outside while its tasks were waiting.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kf_trainer_core.base.quoting import shown
from kf_trainer_core.k8s.selectors import valid_label_value
from kf_trainer_core.manifest.builder import (
    IDENTITY_LABEL,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    identity_label_value,
    identity_text,
)

#: Every TrainJob this suite creates carries this label: the shared informer of waits
#: watches only these, so jobs made by others cost a wait nothing.
SUITE_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"


def identity_selector(identity: str | Sequence[str | int | None]) -> str:
    """The label selector matching every attempt submitted for ``identity``."""
    text = identity_text(identity)
    assert text is not None
    return f"{IDENTITY_LABEL}={identity_label_value(text)}"


def labels_selector(labels: Mapping[str, str]) -> str:
    """An equality selector for ``labels`` (``key=value,...``); values must be valid
    label values, which is checked here so that a bad one cannot widen the match. No
    labels at all would select every object: refused."""
    if not labels:
        raise ValueError(
            "no labels to select by: an empty selector selects every TrainJob of the "
            "namespace. Fix: name at least one label."
        )
    parts = []
    for key, value in sorted(labels.items()):
        if not valid_label_value(value):
            raise ValueError(f"{shown(value)} is not a valid label value for {shown(key)}")
        parts.append(f"{key}={value}")
    return ",".join(parts)
