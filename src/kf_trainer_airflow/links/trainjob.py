"""The task's link to its TrainJob on a dashboard (the Kubeflow UI, a cluster console).

The operator fills the URL template (its ``dashboard_url`` argument, else the
connection's ``dashboard_url``) once it knows the job's name and namespace, and stores
the result in XCom under this link's key: the UI shows the link while the job runs,
and the API server never needs the connection to draw it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, cast

from kf_trainer_airflow._compat import BaseOperatorLink, BaseXCom

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey

#: XCom key of the job's dashboard URL (also what the link reads).
LINK_XCOM_KEY = "trainjob_url"


class TrainJobLink(BaseOperatorLink):
    """*Kubeflow TrainJob*: the job's page, when a dashboard URL template is set."""

    name: ClassVar[str] = "Kubeflow TrainJob"

    @property
    def xcom_key(self) -> str:
        return LINK_XCOM_KEY

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        # TaskInstanceKey is a NamedTuple: read-only where the protocol says settable.
        value: Any = BaseXCom.get_value(ti_key=cast("Any", ti_key), key=LINK_XCOM_KEY)
        return value if isinstance(value, str) else ""
