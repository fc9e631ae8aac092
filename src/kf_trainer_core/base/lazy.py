"""A package's names resolved on first use (PEP 562), for the adapters' packages: a DAG
file or flow that imports one module of a package must not pay for the others."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

from kf_trainer_core.base.quoting import shown


def lazy_names(
    package: str, where: Mapping[str, str], namespace: MutableMapping[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` (its ``__name__``), whose
    names ``where`` maps to the modules that define them (``module:attribute`` when the
    name differs there; ``module:`` for the module itself). ``namespace`` is the package's
    ``globals()``: a name, once imported, is kept there, so the next lookup is a plain
    one; ``__dir__`` lists the lazy names beside the loaded ones (``prefect block
    register -m`` finds blocks by listing a module's members)."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {shown(package)} has no attribute {shown(name)}")
        path, _, attribute = module.partition(":")
        found = importlib.import_module(path)
        value = getattr(found, attribute or name) if attribute or ":" not in module else found
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(where))

    return __getattr__, __dir__
