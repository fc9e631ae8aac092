"""OpenLineage objects for a TrainJob task: the provider's ``OperatorLineage`` built from
the core's plain lineage data (:mod:`kf_trainer_core.manifest.lineage`).

Imported only inside the operator's ``get_openlineage_facets_on_*`` methods, which the
OpenLineage provider calls when it is installed: without the provider nothing here is
imported, and the operator module stays cheap to import.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from airflow.providers.openlineage.extractors.base import OperatorLineage
from attrs import define
from openlineage.client.event_v2 import InputDataset, OutputDataset
from openlineage.client.facet_v2 import RunFacet, dataset_type_dataset, symlinks_dataset

from kf_trainer_core.tasks import lineage

if TYPE_CHECKING:
    from kf_trainer_airflow.operators.trainjob import TrainJobOperator

log = logging.getLogger(__name__)

#: The run facet's key in the event's ``run.facets``.
RUN_FACET_KEY = "kubeflow_trainjob"
_DATASET_TYPE = {"dataset": "FILE", "model": "MODEL"}


@define
class KubeflowTrainJobRunFacet(RunFacet):
    """The TrainJob that ran the task (the fields known when the event is sent)."""

    # OpenLineage facet fields are camelCase, as in the TrainJob's own manifest.
    apiVersion: str
    kind: str
    name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    runtime: str | None = None
    runtimeKind: str | None = None
    status: str | None = None

    @staticmethod
    def _get_schema() -> str:
        # The fields are described in docs/lineage.md; the suite publishes no schema host.
        return "urn:kf-trainer-suite:facet:KubeflowTrainJobRunFacet:1"


def _facets(found: lineage.LineageDataset) -> dict[str, Any]:
    facets: dict[str, Any] = {
        "datasetType": dataset_type_dataset.DatasetTypeDatasetFacet(
            datasetType=_DATASET_TYPE.get(found.role, "FILE")
        )
    }
    if found.symlinks:
        facets["symlinks"] = symlinks_dataset.SymlinksDatasetFacet(
            identifiers=[
                symlinks_dataset.Identifier(namespace=ns, name=name, type=kind)
                for ns, name, kind in found.symlinks
            ]
        )
    return facets


def operator_lineage(
    inputs: Sequence[lineage.LineageDataset],
    outputs: Sequence[lineage.LineageDataset],
    run: Mapping[str, Any],
) -> OperatorLineage[Any, Any]:
    """The provider's ``OperatorLineage`` for the given data sets and run facet data."""
    return OperatorLineage(
        inputs=[InputDataset(d.namespace, d.name, facets=_facets(d)) for d in inputs],
        outputs=[OutputDataset(d.namespace, d.name, facets=_facets(d)) for d in outputs],
        run_facets={RUN_FACET_KEY: KubeflowTrainJobRunFacet(**dict(run))},
    )


def _uid(op: TrainJobOperator, name: str | None) -> str | None:
    """The job's uid: known when this try submitted it, else read once (a try that
    reconnected, or resumed after deferring). Lineage never fails the task."""
    if op._job_uid or not name:
        return op._job_uid
    try:
        with op._held() as task:
            op._job_uid = task.call(lambda c: c.get_job(name)).uid
    except Exception as exc:  # e.g. the job was deleted (on_finish_action="delete")
        log.debug("No uid for TrainJob %s in lineage: %s", name, exc)
    return op._job_uid


def task_lineage(
    op: TrainJobOperator, stage: Literal["start", "complete", "failure"]
) -> OperatorLineage[Any, Any]:
    """The task's lineage at ``stage``: inputs from the spec's initializers, the output
    model from the function's returned ``model_uri`` (``complete`` only) and the
    TrainJob as a run facet."""
    from kf_trainer_core.spec import Name

    spec = op.build_spec()
    fixed = spec.option(Name)
    name = op._job_name or (fixed.name if fixed is not None else None)
    namespace = op._job_namespace or op.namespace
    if namespace is None:
        try:
            namespace = op.hook.get_backend_config().resolve_namespace()
        except Exception as exc:  # no connection yet: the namespace stays unknown
            log.debug("No namespace for lineage: %s", exc)
    outputs = op._outputs if stage == "complete" else None
    run = lineage.run_facet(
        name=outputs.name if outputs else name,
        namespace=outputs.namespace if outputs else namespace,
        runtime=spec.runtime.name,
        runtime_kind=spec.runtime.kind.value,
        uid=_uid(op, name) if stage != "start" else op._job_uid,
        status=outputs.status.value if outputs else None,
    )
    return operator_lineage(
        lineage.spec_inputs(spec, k8s_namespace=namespace),
        lineage.result_outputs(outputs.result, k8s_namespace=namespace) if outputs else [],
        run,
    )
