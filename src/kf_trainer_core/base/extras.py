"""The optional parts of the suite and the one error for a missing one.

Each orchestrator adapter and the container backend need a library the base install
leaves out; ``pip install 'kf-trainer-suite[EXTRA]'`` brings it. A package of the suite
that needs one checks for it when imported (without importing it: the check is a
lookup) and raises :class:`MissingExtraError`, which names the extra to install, instead
of the library's own ``No module named …``.
"""

from __future__ import annotations

import importlib.util

from kf_trainer_core.base.project import DISTRIBUTION


class MissingExtraError(ModuleNotFoundError):
    """An optional library of the suite is not installed; the message names the extra
    that installs it. A ``ModuleNotFoundError``, so ``except ImportError`` still works."""


def install_hint(extra: str) -> str:
    """The command that installs ``extra``."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"


def require(module: str, extra: str, needed_by: str, what: str | None = None) -> None:
    """Raise :class:`MissingExtraError` unless ``module`` can be imported.

    ``needed_by`` is the suite's package that needs it, ``what`` the library as users
    know it (default: ``module``)."""
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module set to None
        found = False
    if not found:
        raise MissingExtraError(
            f"{needed_by} needs {what or module}, which is not installed. "
            f"Fix: {install_hint(extra)}",
            name=module,
        )
