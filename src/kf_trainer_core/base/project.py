"""What the suite is and where a user finds it: the distribution's name and version, and
its documentation online (an installed copy has no ``docs/`` folder to point at).

Release ``X.Y.Z`` is tagged ``vX.Y.Z`` in the repository (CHANGELOG.md, "Versions"):
the links of a release point at that tag's pages, which describe the code installed;
a development build (``X.Y.Z.devN``, a local version) points at ``main``.
"""

from __future__ import annotations

import re

#: The distribution's name on PyPI.
DISTRIBUTION = "kf-trainer-suite"
#: The source repository (pyproject.toml's ``[project.urls]`` name the same).
REPOSITORY = "https://github.com/kf-trainer-suite/kf-trainer-suite"

_RELEASE = re.compile(r"\d+\.\d+\.\d+")


def version() -> str:
    """The installed version (``0+unknown`` for a source tree that was never installed)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed(DISTRIBUTION)
    except PackageNotFoundError:
        return "0+unknown"


def docs_ref(of: str | None = None) -> str:
    """The repository ref whose docs describe version ``of`` (default: the installed
    one): its tag for a release, ``main`` otherwise."""
    current = version() if of is None else of
    return f"v{current}" if _RELEASE.fullmatch(current) else "main"


def docs_url(page: str = "", *, of: str | None = None) -> str:
    """The online page ``page`` of ``docs/`` (``"cli.md"``; ``""``: the folder) for
    version ``of`` (default: the installed one)."""
    ref = docs_ref(of)
    if not page:
        return f"{REPOSITORY}/tree/{ref}/docs"
    return f"{REPOSITORY}/blob/{ref}/docs/{page}"
