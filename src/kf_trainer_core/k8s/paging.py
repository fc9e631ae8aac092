"""Paginated lists, processed page by page.

A namespace keeps every finished TrainJob (Trainer has no TTL), each embedding its
program; one unpaginated LIST of it can be hundreds of MiB. :func:`list_pages` asks for
``limit`` objects at a time and hands each page's items to ``keep`` before asking for
the next, so only one page of full objects is alive at a time: the caller keeps what it
needs of each (a slim copy, a few fields, or nothing).

A continue token expires when etcd compacts past the list's version (about five
minutes on a default apiserver): the server answers 410 Gone, and the list starts again
from the beginning — what was kept of the earlier pages is thrown away by calling
``restart`` — as client-go's pager does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kf_trainer_core.k8s.api import Api
from kf_trainer_core.k8s.calls import ListObjects
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.k8s.resources import Resource

#: Objects per page when nothing else is configured. 250 TrainJobs of 20 KiB are 5 MiB
#: of JSON: enough to list 10,000 in 40 requests, little enough to stay small in memory.
DEFAULT_PAGE_SIZE = 250

#: How many times an expired continue token may restart one list before giving up
#: (each restart is a fresh, consistent list; a server compacting faster than a list
#: can be read is misconfigured or overloaded).
MAX_RESTARTS = 5


async def list_pages(
    api: Api,
    resource: Resource,
    namespace: str | None,
    keep: Callable[[list[dict[str, Any]]], None],
    *,
    label_selector: str | None = None,
    field_selector: str | None = None,
    page_size: int | None = DEFAULT_PAGE_SIZE,
    restart: Callable[[], None] | None = None,
    resource_version: str | None = None,
) -> dict[str, Any]:
    """List ``resource`` a page at a time, calling ``keep(items)`` for each page. Returns
    the last page's list metadata (its ``resourceVersion`` is the list's: a watch
    resumes from it). ``page_size`` ``None`` or ``0`` asks for everything at once;
    ``resource_version`` goes with the first page (see :class:`ListObjects`)."""
    restarts = 0
    token: str | None = None
    while True:
        try:
            page: Mapping[str, Any] = await api(
                ListObjects(
                    resource,
                    namespace,
                    label_selector,
                    field_selector,
                    limit=page_size or None,
                    continue_token=token,
                    resource_version=None if token else resource_version,
                )
            )
        except ApiError as err:
            if not (err.gone and token is not None) or restarts >= MAX_RESTARTS:
                raise
            # The continue token expired: start over with a fresh, consistent list.
            restarts += 1
            token = None
            if restart is not None:
                restart()
            continue
        items = list(page.get("items") or [])
        meta = dict(page.get("metadata") or {})
        # Not referenced while the next page is read: one page of full objects alive at
        # a time, not two.
        del page
        keep(items)
        del items
        token = meta.get("continue") or None
        if token is None:
            return meta


async def list_all(
    api: Api,
    resource: Resource,
    namespace: str | None,
    *,
    label_selector: str | None = None,
    field_selector: str | None = None,
    page_size: int | None = DEFAULT_PAGE_SIZE,
    slim: Callable[[dict[str, Any]], Any] | None = None,
    where: Callable[[dict[str, Any]], bool] | None = None,
    resource_version: str | None = None,
) -> dict[str, Any]:
    """A paginated list shaped as one list object (``items`` and ``metadata``), each
    item filtered by ``where`` and reduced by ``slim`` as its page arrives."""
    items: list[Any] = []

    def keep(page: list[dict[str, Any]]) -> None:
        for obj in page:
            if where is None or where(obj):
                items.append(obj if slim is None else slim(obj))

    meta = await list_pages(
        api,
        resource,
        namespace,
        keep,
        label_selector=label_selector,
        field_selector=field_selector,
        page_size=page_size,
        restart=items.clear,
        resource_version=resource_version,
    )
    meta.pop("continue", None)
    meta.pop("remainingItemCount", None)
    return {"metadata": meta, "items": items}
