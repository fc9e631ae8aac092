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
import contextlib
import fcntl
import json
import os
import shutil
import signal
import tempfile
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

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
#: Names the file where the workers write each grouped test's group, for the scheduler.
GROUPS_ENV = "KF_TEST_XDIST_GROUPS"


def pytest_configure(config: pytest.Config) -> None:
    # The controller of a run on workers: a file for the groups (see _GroupScheduling),
    # named in the environment the workers start with.
    if getattr(config, "workerinput", None) is None and config.getoption("dist", "no") != "no":
        fd, path = tempfile.mkstemp(prefix="kf-test-groups-", suffix=".json")
        os.close(fd)
        os.environ[GROUPS_ENV] = path
        config.add_cleanup(lambda: Path(path).unlink(missing_ok=True))


def pytest_collection_finish(session: pytest.Session) -> None:
    path = os.environ.get(GROUPS_ENV)
    if path is None or getattr(session.config, "workerinput", None) is None:
        return
    groups = {
        item.nodeid: str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
        for item in session.items
        if (mark := item.get_closest_marker("xdist_group")) is not None
    }
    # Every worker collects the same tests: whichever writes last writes the same.
    part = Path(f"{path}.{os.getpid()}")
    part.write_text(json.dumps(groups))
    part.replace(path)


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup``, with the groups read from the workers' file: pytest-xdist
    3.8 marks a test's group by appending it to ``item._nodeid``, which pytest 9 no
    longer reads (the node id lives elsewhere), so its own scheduler saw no group and
    spread the control plane's tests over every worker, each starting one."""
    if config.getoption("dist") != "loadgroup":
        return None
    return _group_scheduling()(config, log)


def _group_scheduling() -> type:
    from xdist.scheduler import LoadGroupScheduling

    class _GroupScheduling(LoadGroupScheduling):  # type: ignore[misc]
        _groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._groups is None:
                # Read once the collections are complete (the first call comes then).
                self._groups = json.loads(Path(os.environ[GROUPS_ENV]).read_text() or "{}")
            return self._groups.get(nodeid) or super()._split_scope(nodeid)

    return _GroupScheduling


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.pluginmanager.hasplugin("xdist"):
        # One Prefect server (~20-50 s of a core to start) for all the tests that use it,
        # not one per worker: they run on one worker (``--dist loadgroup``). Those also
        # on the real control plane stay in its group (the plugin put them there): its
        # worker starts a second server rather than a second control plane.
        # A module that shares a fixture of its own among its tests (scope module or
        # session: built wheels, environments, parsed CRDs) runs on one worker, which
        # builds it once.
        for item in items:
            if item.get_closest_marker("xdist_group") is not None:
                continue
            if "prefect_server" in getattr(item, "fixturenames", ()):
                item.add_marker(pytest.mark.xdist_group(PREFECT_GROUP))
            elif _shares_a_fixture_of_its_module(item):
                item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
    # The tests that run alone go first (while they run, the other workers wait: early,
    # the waiting is short); then the longest tests (marked slow), so that the workers'
    # last minutes are not one worker finishing a five-minute test alone. A stable sort:
    # every worker collects the same order, which pytest-xdist requires.
    items.sort(
        key=lambda item: (
            item.get_closest_marker(ALONE) is None,
            item.get_closest_marker("slow") is None,
        )
    )


def _shares_a_fixture_of_its_module(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    module = item.nodeid.split("::")[0]
    return any(
        d.scope in ("module", "session") and d.baseid == module
        for defs in info.name2fixturedefs.values()
        for d in defs
    )


# -- Tests that run alone ----------------------------------------------------------------
#: The marker of a test that no other test of the session may run beside: it measures
#: how long callbacks block an event loop, and a callback's wait for the GIL held by a
#: thread that the other workers' load keeps off the cores counts as blocked
#: (``kf_trainer_core.testing.loopwatch``): 13 of 13,751 callbacks of the Prefect loop
#: test passed 50 ms at load 20. It measures nothing else, and asserts no wall time.
ALONE = "alone"


@pytest.hookimpl(wrapper=True, tryfirst=True)  # outermost: the wait is not the test's time
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Under pytest-xdist, every test holds the session's lock while it is set up, run
    and torn down: shared by the others, alone by a test marked ``alone``, which waits
    for the running tests to end and holds new ones back (a writer-first lock of two
    files: ``gate`` lets no new test start while an ``alone`` test waits)."""
    locks = _session_locks(item.config)
    if locks is None:
        return (yield)
    with _turn(locks, alone=item.get_closest_marker(ALONE) is not None):
        return (yield)


def _session_locks(config: pytest.Config) -> Path | None:
    """The folder of the lock files: the run's temporary folder, whose subfolders are
    the workers' (``popen-gw0``...), kept and pruned as pytest does; None when the tests
    run in one process."""
    if getattr(config, "workerinput", None) is None or not config.option.basetemp:
        return None
    return Path(config.option.basetemp).parent


@contextlib.contextmanager
def _turn(folder: Path, *, alone: bool) -> Generator[None, None, None]:
    with open(folder / "kf-gate.lock", "a") as gate, open(folder / "kf-run.lock", "a") as run:
        if alone:
            fcntl.flock(gate, fcntl.LOCK_EX)  # no new test starts from now on
            fcntl.flock(run, fcntl.LOCK_EX)  # the running ones have ended
        else:
            fcntl.flock(gate, fcntl.LOCK_SH)  # no test waits to run alone
            fcntl.flock(run, fcntl.LOCK_SH)
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(run, fcntl.LOCK_UN)
            if alone:
                fcntl.flock(gate, fcntl.LOCK_UN)
