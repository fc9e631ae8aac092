"""Shared test set-up for every test directory.

- The Kubernetes-API test server fixtures (``kube``, ``kube_server``,
  ``kubeconfig_path``) come from the suite's pytest plugin.
- Prefect reads its settings when first imported, so its environment is set here, at
  import, before any test module imports it: a private ``PREFECT_HOME``, no analytics,
  and a server start-up timeout that two busy cores meet (the 20 s default does not).
- ``prefect_server``: one ephemeral Prefect server for the whole session (~20 s to
  start), shared by ``tests/prefect`` and ``tests/examples``.

Airflow's home is set up by ``tests/airflow/conftest.py`` (and by
``tests/examples/conftest.py`` when run alone).
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator

import pytest

pytest_plugins = ["kf_trainer_core.testing.pytest_plugin"]

PREFECT_HOME_PREFIX = "kf-prefect-home-"
PREFECT_STARTUP_TIMEOUT = 120

_prefect_home = tempfile.mkdtemp(prefix=PREFECT_HOME_PREFIX)
atexit.register(shutil.rmtree, _prefect_home, ignore_errors=True)
os.environ["PREFECT_HOME"] = _prefect_home
os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] = str(PREFECT_STARTUP_TIMEOUT)
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ["DO_NOT_TRACK"] = "1"
os.environ.pop("PREFECT_API_URL", None)
os.environ.pop("PREFECT_API_KEY", None)

# A command started in the background by a non-interactive shell (`.ci/run &`, a CI
# runner) inherits SIGINT ignored, and so would every program the tests start: Python
# then installs no KeyboardInterrupt handler, and the Ctrl-C tests' SIGINT is lost (the
# job runs to its end). Their users press Ctrl-C in a terminal, where it is not ignored.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def prefect_server() -> Iterator[str]:
    """One ephemeral Prefect server (temporary database) for the session; yields its
    API URL."""
    from prefect.settings import (
        PREFECT_API_URL,
        PREFECT_HOME,
        PREFECT_SERVER_ANALYTICS_ENABLED,
        temporary_settings,
    )
    from prefect.testing.utilities import prefect_test_harness

    # Also as settings, in case Prefect was imported before this file set the variables.
    with (
        temporary_settings(
            updates={PREFECT_HOME: _prefect_home, PREFECT_SERVER_ANALYTICS_ENABLED: False}
        ),
        prefect_test_harness(server_startup_timeout=PREFECT_STARTUP_TIMEOUT),
    ):
        yield str(PREFECT_API_URL.value())


# -- Running on several workers (pytest-xdist; pyproject's addopts say `-n auto`) -------
#: Workers per core. Most of the suite's time is spent waiting (on servers, child
#: processes, containers, Airflow's and Prefect's machinery), not computing, so it
#: runs on more workers than cores.
WORKERS_PER_CORE = 2
#: ``KF_TEST_WORKERS=N`` sets the count (``-n N`` on the command line does too; ``-n 0``
#: runs everything in this process, for a debugger).
WORKERS_ENV = "KF_TEST_WORKERS"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """The worker count of ``-n auto``: two per core, at least 4, at most 8 (each
    worker imports Airflow, Prefect and KFP: ~0.5 GiB)."""
    given = os.environ.get(WORKERS_ENV, "").strip()
    if given:
        return int(given)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return min(8, max(4, WORKERS_PER_CORE * (cores or 1)))


#: The pytest-xdist group of the tests on the session's Prefect server.
PREFECT_GROUP = "kf-prefect-server"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.pluginmanager.hasplugin("xdist"):
        # One Prefect server (~20-50 s of a core to start) for all the tests that use it,
        # not one per worker: they run on one worker (``--dist loadgroup``). Those also
        # on the real control plane stay in its group (the plugin put them there): its
        # worker starts a second server rather than a second control plane.
        for item in items:
            if "prefect_server" in getattr(item, "fixturenames", ()) and (
                item.get_closest_marker("xdist_group") is None
            ):
                item.add_marker(pytest.mark.xdist_group(PREFECT_GROUP))
    # The longest tests (marked slow) start first, so that the workers' last minutes are
    # not one worker finishing a five-minute test alone. A stable sort: every worker
    # collects the same order, which pytest-xdist requires.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
