"""The folder a container mounts (and a supervisor puts on its path) to import the suite
holds ``kf_trainer_core``: after the core's modules moved into sub-packages it named
``src/kf_trainer_core`` itself, and every container initializer failed with ``No module
named 'kf_trainer_core'``."""

from __future__ import annotations

from pathlib import Path

import kf_trainer_core
from kf_trainer_core.backends.local.procs import package_root


def test_package_root_holds_the_package() -> None:
    root = Path(package_root())
    assert (root / "kf_trainer_core" / "__init__.py").is_file()
    assert root / "kf_trainer_core" == Path(kf_trainer_core.__file__).resolve().parent
