"""What a TrainJob shows in the Prefect UI: a progress bar, a table of steps and
metrics, a markdown summary and a dashboard link.

The builders are the core's (:mod:`kf_trainer_core.cluster.job_summary`, re-exported here);
:class:`ArtifactPublisher` creates and updates the artifacts inside a task run.
Everything shown comes from the job's status, steps, metrics, result and failure —
never from the credentials, which the artifacts have no access to.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kf_trainer_core.tasks import (
    job_summary,
    outputs_summary,
    progress_description,
    steps_table,
    summary_markdown,
)
from kf_trainer_core.tasks.jobs import ProgressState, outputs_rows

if TYPE_CHECKING:
    from kf_trainer_core.tasks import JobOutputs, TrainJob

__all__ = [
    "ArtifactPublisher",
    "artifact_key",
    "job_summary",
    "outputs_summary",
    "progress_description",
    "steps_table",
    "summary_markdown",
]

_log = logging.getLogger("kf_trainer_prefect.artifacts")


def artifact_key(job: str, kind: str) -> str:
    """The artifact key for one kind of artifact of a job. Keys take lowercase letters,
    digits and dashes, which is exactly what TrainJob names are made of."""
    return f"{job}-{kind}"


class ArtifactPublisher:
    """Creates and updates a job's artifacts inside a task run (both faces of the tasks
    run the same coroutines, so this is async only)."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.progress = ProgressState(enabled=enabled, log=_log)

    async def link(self, job: TrainJob, link: str | None) -> None:
        """Create the dashboard link artifact of a job, when a dashboard is configured."""
        if not (self.enabled and link):
            return
        from prefect.artifacts import acreate_link_artifact

        try:
            await acreate_link_artifact(
                link=link,
                link_text=f"TrainJob {job.namespace}/{job.name}",
                key=artifact_key(job.name, "dashboard"),
                description=f"TrainJob {job.namespace}/{job.name} in the dashboard",
            )
        except Exception as exc:
            _log.warning("could not create the link artifact of %s: %s", job.name, exc)

    async def start(self, job: TrainJob, link: str | None) -> None:
        """Create the progress artifact (and the dashboard link) of a submitted job."""
        if not self.enabled:
            return
        from prefect.artifacts import acreate_progress_artifact

        await self.link(job, link)
        try:
            self.progress.observe(job)
            self.progress.artifact_id = await acreate_progress_artifact(
                progress=self.progress.percentage,
                key=artifact_key(job.name, "progress"),
                description=self.progress.description,
            )
            self.progress.pushed = (self.progress.percentage, self.progress.description)
        except Exception as exc:
            self.progress.failed(exc)

    async def flush(self) -> None:
        """Push the latest progress, if it changed."""
        state = self.progress
        if not state.pending():
            return
        from prefect.artifacts import aupdate_progress_artifact

        wanted = (state.percentage, state.description)
        try:
            assert state.artifact_id is not None
            await aupdate_progress_artifact(
                artifact_id=state.artifact_id, progress=wanted[0], description=wanted[1]
            )
            state.pushed = wanted
        except Exception as exc:
            state.failed(exc)

    async def finish(self, job_name: str, markdown: str, rows: list[dict[str, Any]]) -> None:
        """Create the summary and the steps-and-metrics table."""
        if not self.enabled:
            return
        from prefect.artifacts import acreate_markdown_artifact, acreate_table_artifact

        await self.flush()
        try:
            await acreate_markdown_artifact(
                markdown=markdown,
                key=artifact_key(job_name, "summary"),
                description=f"TrainJob {job_name}",
            )
            if rows:
                await acreate_table_artifact(
                    table=rows,
                    key=artifact_key(job_name, "steps"),
                    description=f"Steps and metrics of TrainJob {job_name}",
                )
        except Exception as exc:
            _log.warning("could not create the artifacts of TrainJob %s: %s", job_name, exc)

    async def outputs(self, result: JobOutputs, link: str | None) -> None:
        """:meth:`finish` with the summary and table of a job's outputs."""
        await self.finish(result.name, outputs_summary(result, link=link), outputs_rows(result))
