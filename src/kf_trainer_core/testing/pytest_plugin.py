"""Pytest fixtures for the Kubernetes-API test server.

Enable them from a ``conftest.py``::

    pytest_plugins = ["kf_trainer_core.testing.pytest_plugin"]

``kube_server`` starts one server per test session (with the simulated Trainer
controller when it is available); ``kube`` resets it before each test and yields it;
``kubeconfig_path`` is a kubeconfig for it with namespace ``default``.

The real control plane (:mod:`kf_trainer_core.testing.control_plane`): ``control_plane``
starts one per session (``shared/control-plane`` or ``$KF_CONTROL_PLANE``, or etcd +
kube-apiserver alone from ``$KUBEBUILDER_ASSETS``) in a temporary directory on free ports
(``$KF_CONTROL_PLANE_PORT_BASE`` fixes them) and stops it at the end; its tests skip with
the reason when it cannot run here, or fail with ``--require-control-plane`` (or
``KF_CONTROL_PLANE_REQUIRED=1``), which CI sets. ``control_plane_namespace`` is a fresh
namespace per test and ``control_plane_kubeconfig`` a kubeconfig whose context is that
namespace. ``kueue_control_plane`` is a second one, with the real Kueue (``start.sh
--kueue``), started only when a test asks for it (Kueue's webhooks act on every
TrainJob, so the first stays a cluster without Kueue). Tests that use them are marked
``control_plane`` (``-m control_plane`` selects them, ``-m "not control_plane"`` leaves
them out).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from kf_trainer_core.testing.control_plane import (
    ATTACH_ENV,
    CONTROL_PLANE_ENV,
    KUEUE_ENV,
    ControlPlane,
    ControlPlaneUnavailable,
    start_control_plane,
)
from kf_trainer_core.testing.control_plane.multikueue import MultiKueuePair
from kf_trainer_core.testing.server import KubeTestServer

__all__ = [
    "control_plane",
    "control_plane_kubeconfig",
    "control_plane_namespace",
    "fresh_server",
    "kube",
    "kube_server",
    "kubeconfig_path",
    "kueue_control_plane",
    "multikueue",
    "multikueue_namespace",
]

#: The marker of tests that run on the real control plane.
MARKER = "control_plane"
REQUIRED_ENV = "KF_CONTROL_PLANE_REQUIRED"
#: Fixtures on the control plane with Kueue (one xdist group with it).
_KUEUE_FIXTURES = frozenset({"kueue_control_plane", "multikueue", "multikueue_namespace"})
_CP_FIXTURES = (
    frozenset({"control_plane", "control_plane_namespace", "control_plane_kubeconfig"})
    | _KUEUE_FIXTURES
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "kf_trainer_default_scenario",
        "the test server's scenario preset for a TrainJob that asks for none: 'default' "
        "(its training function really runs where it can) or another preset, e.g. "
        "'success' (every run simulated, with a canned result)",
        default="default",
    )
    group = parser.getgroup("kf-trainer", "kf-trainer-suite test servers")
    group.addoption(
        "--control-plane",
        metavar="DIR",
        default=None,
        help=f"the control-plane folder (holding start.sh); default ${CONTROL_PLANE_ENV}, "
        "else shared/control-plane above the project",
    )
    group.addoption(
        "--require-control-plane",
        action="store_true",
        default=False,
        help=f"fail, not skip, the {MARKER} tests when no control plane can run "
        f"(also ${REQUIRED_ENV}=1)",
    )


#: The ini option naming the scenario preset of a TrainJob that asks for none.
DEFAULT_SCENARIO_INI = "kf_trainer_default_scenario"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}: runs against the real control plane (kube-apiserver + etcd)"
    )
    folder = config.getoption("--control-plane", default=None)
    if folder:
        os.environ[CONTROL_PLANE_ENV] = str(Path(folder).resolve())


#: The pytest-xdist groups (``--dist loadgroup``) of the tests on the real control plane
#: and of those on the one with Kueue.
XDIST_GROUP = "kf-control-plane"
KUEUE_XDIST_GROUP = "kf-kueue-plane"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Under pytest-xdist every worker is a session of its own: each would start a control
    # plane (~15 s of two cores, ~850 MiB) for its share of these tests. Grouped, the
    # tests of each control plane run on one worker, which starts it once, whatever the
    # worker count (``--dist loadgroup``; other modes ignore the groups). A test that
    # picks its control plane at run time (a parameter) says which with a group of its
    # own, set before this hook runs; it is left as it is.
    grouped = config.pluginmanager.hasplugin("xdist")
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if _CP_FIXTURES & names:
            item.add_marker(MARKER)
        if not grouped or item.get_closest_marker(MARKER) is None:
            continue
        if item.get_closest_marker("xdist_group") is None:
            kueue = bool(_KUEUE_FIXTURES & names)
            item.add_marker(pytest.mark.xdist_group(KUEUE_XDIST_GROUP if kueue else XDIST_GROUP))


@pytest.fixture(scope="session")
def control_plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    """One real control plane for the session, stopped at the end (even on failure)
    and its directory (~530 MB) removed."""
    yield from _session_control_plane(request, kueue=False)


@pytest.fixture(scope="session")
def kueue_control_plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    """A real control plane with the real Kueue (~1 GiB, ~13 s cold), for the session's
    Kueue tests; its tests skip (or fail with ``--require-control-plane``) where it
    cannot run."""
    yield from _session_control_plane(request, kueue=True)


@pytest.fixture(scope="session")
def multikueue(
    request: pytest.FixtureRequest, kueue_control_plane: ControlPlane
) -> Iterator[MultiKueuePair]:
    """MultiKueue on two real control planes: ``kueue_control_plane`` as the manager
    and a second one with Kueue as the worker (~1 GiB, ~13 s cold), wired once for the
    session (:class:`~kf_trainer_core.testing.control_plane.multikueue.MultiKueuePair`)."""
    kueue_control_plane.require_kueue()
    for worker in _session_control_plane(request, kueue=True, second=True):
        worker.require_kueue()
        pair = MultiKueuePair(kueue_control_plane, worker)
        pair.wire()
        yield pair


@pytest.fixture
def multikueue_namespace(multikueue: MultiKueuePair) -> Iterator[str]:
    """A fresh namespace on both clusters of :func:`multikueue`, with the LocalQueue
    ``multikueue.queue`` in each; deleted on both after the test."""
    name = multikueue.new_namespace()
    try:
        yield name
    finally:
        multikueue.delete_namespace(name)


def _session_control_plane(
    request: pytest.FixtureRequest, *, kueue: bool, second: bool = False
) -> Iterator[ControlPlane]:
    required = request.config.getoption("--require-control-plane", default=False) or (
        os.environ.get(REQUIRED_ENV, "") not in ("", "0")
    )
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    # Not under pytest's basetemp: that is pruned by other sessions of the same user,
    # which would delete a running control plane's files.
    directory = Path(tempfile.mkdtemp(prefix="kf-kueue-plane-" if kueue else "kf-control-plane-"))
    try:
        cp = start_control_plane(
            directory, worker=int(worker) if worker.isdigit() else 0, kueue=kueue, second=second
        )
    except ControlPlaneUnavailable as exc:
        shutil.rmtree(directory, ignore_errors=True)
        optional = (kueue and os.environ.get(KUEUE_ENV, "") == "0") or (
            second and bool(os.environ.get(ATTACH_ENV))
        )
        if required and not optional:
            pytest.fail(f"{exc} (a control plane is required here)", pytrace=False)
        pytest.skip(str(exc))
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise

    def finish() -> None:
        cp.stop()
        shutil.rmtree(directory, ignore_errors=True)  # an attached one's DIR is elsewhere

    atexit.register(finish)  # also on an interrupted session
    try:
        yield cp
    finally:
        from kf_trainer_core.programs.informer import shutdown_informers

        shutdown_informers()
        finish()


@pytest.fixture
def control_plane_namespace(control_plane: ControlPlane) -> Iterator[str]:
    """A fresh namespace on the real control plane, deleted after the test."""
    name = control_plane.new_namespace()
    try:
        yield name
    finally:
        control_plane.delete_namespace(name)


@pytest.fixture
def control_plane_kubeconfig(
    control_plane: ControlPlane, control_plane_namespace: str, tmp_path: Path
) -> Path:
    """A kubeconfig for the real control plane whose namespace is the test's own."""
    return control_plane.kubeconfig_for(control_plane_namespace, tmp_path / "cp-kubeconfig")


@pytest.fixture(scope="session")
def kube_server(pytestconfig: pytest.Config) -> Iterator[KubeTestServer]:
    """One running :class:`KubeTestServer` for the whole session (controller started
    when :mod:`kf_trainer_core.testing.controller` exists). A TrainJob that asks for no
    scenario runs its training function for real where it can (the ``default``
    preset); the ini option ``kf_trainer_default_scenario`` names another preset."""
    server = KubeTestServer(default_scenario=str(pytestconfig.getini(DEFAULT_SCENARIO_INI)))
    server.start(controller=True)
    try:
        yield server
    finally:
        # Shared watches outlive their waits by design: stop them while the server
        # still answers, or they retry against a closed port until the process exits.
        from kf_trainer_core.programs.informer import shutdown_informers

        shutdown_informers()
        server.stop()


@pytest.fixture
def kube(kube_server: KubeTestServer) -> KubeTestServer:
    """The session's server, reset to a fresh state (seeded namespaces and runtimes)."""
    return fresh_server(kube_server)


def fresh_server(server: KubeTestServer) -> KubeTestServer:
    """``server`` reset, with no watch of an earlier test still open on it: a shared
    watch lingers after its last wait (for the next one, by design), and one left by an
    earlier test would otherwise re-list this test's objects, add to its request log
    and meet the faults and token requirement this test sets."""
    from kf_trainer_core.programs.informer import shutdown_informers

    shutdown_informers(lingering_only=True)
    server.reset()
    return server


@pytest.fixture
def kubeconfig_path(kube: KubeTestServer, tmp_path: Path) -> Path:
    """A kubeconfig for ``kube`` (context ``kf-test``, namespace ``default``)."""
    return kube.kubeconfig(tmp_path / "kubeconfig", namespace="default")
