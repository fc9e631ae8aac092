"""What orchestrator tasks share, and the one place adapters import the core from
beyond the client, the spec, the configuration and the errors.

- :mod:`~kf_trainer_core.tasks.lifecycle`: one task run's hold on its TrainJob —
  submit or reattach, one wait with its log, the finish action on kill, ``on_finish``;
- :mod:`~kf_trainer_core.tasks.jobs`: a task's spec, identity and log lines;
- :mod:`~kf_trainer_core.tasks.interruptions`, :mod:`~kf_trainer_core.tasks.sync_runner`:
  what an interruption means for the job, and the synchronous face of a coroutine;
- :mod:`~kf_trainer_core.tasks.step_waits`, :mod:`~kf_trainer_core.tasks.helpers`: waits
  for a step, or for a group of steps;
- :mod:`~kf_trainer_core.tasks.backend_fields`: backend settings given as flat fields.

The names below are the rest of the core an adapter may use — the job's models and
reports, field checks, source helpers — named here so that a change inside the core
does not reach the adapters (``tests/test_layers.py`` holds them to it). Each is
resolved on first use: importing this package costs nothing (DAG files and flows do).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kf_trainer_core.base.lazy import lazy_names

if TYPE_CHECKING:
    from kf_trainer_core.base import pysource, untrusted
    from kf_trainer_core.base.documents import load_json
    from kf_trainer_core.base.extras import require
    from kf_trainer_core.base.offloop import imported
    from kf_trainer_core.base.pysource import parse as parse_source
    from kf_trainer_core.base.quoting import shown
    from kf_trainer_core.base.timeutil import seconds
    from kf_trainer_core.cluster.job_summary import (
        job_summary,
        outputs_summary,
        progress_description,
        steps_table,
        summary_markdown,
    )
    from kf_trainer_core.cluster.outputs import JobOutputs
    from kf_trainer_core.cluster.status import Event, Failure, JobState, Step, TrainJob
    from kf_trainer_core.cluster.waiting import Waiting
    from kf_trainer_core.fields import checks
    from kf_trainer_core.fields._model import (
        did_you_mean,
        fix,
        suggest_keywords,
        unknown_arguments_error,
    )
    from kf_trainer_core.fields.names import name_problem, require_job_name
    from kf_trainer_core.fields.retention import (
        FINISH_ACTIONS,
        PRUNE_OPTIONS,
        PruneOptions,
        check_finish_action,
        parse_age,
    )
    from kf_trainer_core.manifest import lineage
    from kf_trainer_core.manifest.builder import BuiltTrainJob, build_trainjob, identity_text
    from kf_trainer_core.manifest.selectors import labels_selector
    from kf_trainer_core.programs.prune import PruneReport, PruneRules
    from kf_trainer_core.programs.wait import never_admitted
    from kf_trainer_core.spec.function import capture_source, resolve_ref
    from kf_trainer_core.spec.function_template import TRAINER_SETTINGS, FunctionTemplate
    from kf_trainer_core.tasks.lifecycle import (
        Attached,
        SyncTaskJob,
        TaskJob,
        TaskKilled,
        Terms,
        decided_by,
    )

#: Each name and where it is defined (``module:attribute`` where the name differs).
_WHERE = {
    # the job as the cluster reports it, and what a task shows of it
    "Event": "kf_trainer_core.cluster.status",
    "Failure": "kf_trainer_core.cluster.status",
    "JobState": "kf_trainer_core.cluster.status",
    "Step": "kf_trainer_core.cluster.status",
    "TrainJob": "kf_trainer_core.cluster.status",
    "JobOutputs": "kf_trainer_core.cluster.outputs",
    "Waiting": "kf_trainer_core.cluster.waiting",
    "never_admitted": "kf_trainer_core.programs.wait",
    "job_summary": "kf_trainer_core.cluster.job_summary",
    "outputs_summary": "kf_trainer_core.cluster.job_summary",
    "progress_description": "kf_trainer_core.cluster.job_summary",
    "steps_table": "kf_trainer_core.cluster.job_summary",
    "summary_markdown": "kf_trainer_core.cluster.job_summary",
    "untrusted": "kf_trainer_core.base.untrusted:",
    # the lifecycle
    "Attached": "kf_trainer_core.tasks.lifecycle",
    "SyncTaskJob": "kf_trainer_core.tasks.lifecycle",
    "TaskJob": "kf_trainer_core.tasks.lifecycle",
    "TaskKilled": "kf_trainer_core.tasks.lifecycle",
    "Terms": "kf_trainer_core.tasks.lifecycle",
    "decided_by": "kf_trainer_core.tasks.lifecycle",
    # manifests, identities, selectors, lineage
    "BuiltTrainJob": "kf_trainer_core.manifest.builder",
    "build_trainjob": "kf_trainer_core.manifest.builder",
    "identity_text": "kf_trainer_core.manifest.builder",
    "labels_selector": "kf_trainer_core.manifest.selectors",
    "lineage": "kf_trainer_core.manifest.lineage:",
    # pruning and retention
    "FINISH_ACTIONS": "kf_trainer_core.fields.retention",
    "PRUNE_OPTIONS": "kf_trainer_core.fields.retention",
    "PruneOptions": "kf_trainer_core.fields.retention",
    "check_finish_action": "kf_trainer_core.fields.retention",
    "parse_age": "kf_trainer_core.fields.retention",
    "PruneReport": "kf_trainer_core.programs.prune",
    "PruneRules": "kf_trainer_core.programs.prune",
    # arguments checked when a DAG, flow or pipeline is defined, and their errors
    "checks": "kf_trainer_core.fields.checks:",
    "did_you_mean": "kf_trainer_core.fields._model",
    "fix": "kf_trainer_core.fields._model",
    "suggest_keywords": "kf_trainer_core.fields._model",
    "unknown_arguments_error": "kf_trainer_core.fields._model",
    "name_problem": "kf_trainer_core.fields.names",
    "require_job_name": "kf_trainer_core.fields.names",
    "shown": "kf_trainer_core.base.quoting",
    "seconds": "kf_trainer_core.base.timeutil",
    "load_json": "kf_trainer_core.base.documents",
    # an adapter's own machinery: its extra, lazy names, imports off the event loop
    "require": "kf_trainer_core.base.extras",
    "lazy_names": "kf_trainer_core.base.lazy",
    "imported": "kf_trainer_core.base.offloop",
    # Python functions turned into jobs and components
    "pysource": "kf_trainer_core.base.pysource:",
    "parse_source": "kf_trainer_core.base.pysource:parse",
    "capture_source": "kf_trainer_core.spec.function",
    "resolve_ref": "kf_trainer_core.spec.function",
    "FunctionTemplate": "kf_trainer_core.spec.function_template",
    "TRAINER_SETTINGS": "kf_trainer_core.spec.function_template",
}

__all__ = [
    "FINISH_ACTIONS",
    "PRUNE_OPTIONS",
    "TRAINER_SETTINGS",
    "Attached",
    "BuiltTrainJob",
    "Event",
    "Failure",
    "FunctionTemplate",
    "JobOutputs",
    "JobState",
    "PruneOptions",
    "PruneReport",
    "PruneRules",
    "Step",
    "SyncTaskJob",
    "TaskJob",
    "TaskKilled",
    "Terms",
    "TrainJob",
    "Waiting",
    "build_trainjob",
    "capture_source",
    "check_finish_action",
    "checks",
    "decided_by",
    "did_you_mean",
    "fix",
    "identity_text",
    "imported",
    "job_summary",
    "labels_selector",
    "lazy_names",
    "lineage",
    "load_json",
    "name_problem",
    "never_admitted",
    "outputs_summary",
    "parse_age",
    "parse_source",
    "progress_description",
    "pysource",
    "require",
    "require_job_name",
    "resolve_ref",
    "seconds",
    "shown",
    "steps_table",
    "suggest_keywords",
    "summary_markdown",
    "unknown_arguments_error",
    "untrusted",
]

__getattr__, __dir__ = lazy_names(__name__, _WHERE, globals())
