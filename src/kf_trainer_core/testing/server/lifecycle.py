"""The test server itself: construction, start, stop and restart on a background
event loop, and its state (reset, seeding, tokens, the status server, Kueue, the
kubeconfig that points clients at it)."""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from aiohttp import web

from kf_trainer_core.cluster.kueue import WORKLOADS
from kf_trainer_core.k8s.rbac import Rule
from kf_trainer_core.testing.crd import UPSTREAM_ENV, find_upstream
from kf_trainer_core.testing.faults import FaultInjector
from kf_trainer_core.testing.runtimes import install_runtimes
from kf_trainer_core.testing.server.accounting import RequestLog
from kf_trainer_core.testing.server.base import Binding
from kf_trainer_core.testing.server.dispatch import Dispatcher
from kf_trainer_core.testing.store import (
    NAMESPACES,
    SERVICEACCOUNTS,
    PodLogs,
    Store,
)

_log = logging.getLogger("kf_trainer_core.testing.server")
_T = TypeVar("_T")
JSON = dict[str, Any]
_DEFAULT_NAMESPACES = ("default", "kf-test")


class KubeTestServer(Dispatcher):
    """A Kubernetes-API server for tests, on ``127.0.0.1`` (ephemeral port by default).

    It runs in a background thread with its own event loop; all public methods are
    called from other threads. ``store``, ``logs``, ``faults`` and ``requests`` expose
    its state; ``controller`` is the simulated Trainer controller (when that module is
    available). Namespaces ``default`` and ``kf-test`` and the upstream default
    ClusterTrainingRuntimes are seeded at construction and by :meth:`reset`.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        upstream: Path | None = None,
        bookmark_interval: float = 5.0,
        watch_timeout: float = 1800.0,
        user: str = "system:serviceaccount:default:default",
        enforce_namespaces: bool = True,
        seed: bool = True,
        default_scenario: str = "default",
    ) -> None:
        """``upstream``: a folder of upstream CRDs and runtimes (default:
        ``$KF_TRAINER_UPSTREAM``, else a ``shared/upstream`` folder above the working
        directory; without one, the built-in schemas and runtimes: docs/testing.md).
        ``bookmark_interval``: seconds between BOOKMARK events on watches that allow
        them (the apiserver sends about one a minute). ``watch_timeout``: how long a
        watch without ``timeoutSeconds`` stays open. ``user``: the name in 403 messages.
        ``enforce_namespaces``: creating in a missing namespace is 404, as the
        apiserver's NamespaceLifecycle admission does. ``seed``: seed namespaces and
        runtimes now. ``default_scenario``: the scenario preset of a TrainJob that asks
        for none (``default``: its training function really runs where it can;
        ``success``: every run simulated, with a canned result; see
        :mod:`kf_trainer_core.testing.scenarios`)."""
        self.host = host
        self._port = port
        self.store = Store()
        self.logs = PodLogs()
        self.faults = FaultInjector(self)
        self.requests = RequestLog()
        self.default_bookmark_interval = bookmark_interval
        self.bookmark_interval = bookmark_interval
        self.watch_timeout = watch_timeout
        self.watch_buffer_limit = 100_000
        self.user = user
        self.enforce_namespaces = enforce_namespaces
        self._token_check = None
        #: Bearer tokens bound to a user and the RBAC rules granted to it (:meth:`bind`);
        #: requests without one of them are the admin's.
        self.bindings: dict[str, Binding] = {}
        #: The TrainJob status server, when enabled (:meth:`enable_status_server`).
        self.status_server: Any = None
        self._controller: Any = None
        self._controller_started = False
        self._default_scenario = default_scenario
        #: The simulated Kueue (:meth:`install_kueue`); None: Kueue is not installed.
        self.kueue: Any = None

        self._loop = None
        self._thread: threading.Thread | None = None
        self._runner: web.ServerRunner | None = None
        self._executor = None
        self._watchers = {}
        self._open_watches = 0  # kept apart so other threads can read it safely
        #: Response body bytes sent since start (a benchmark probe: what clients received).
        self.bytes_sent = 0
        self._followers = set()
        self._fanned_rv = 0
        self._inbox = []
        self._inbox_lock = threading.Lock()
        self._inbox_scheduled = False
        self._lifecycle = threading.Lock()
        self._commit_hooks = []
        self.store.subscribe_changes(self._on_change)

        named = os.environ.get(UPSTREAM_ENV) if upstream is None else None
        if named and not Path(named).expanduser().is_dir():
            upstream = Path(named).expanduser()  # absent: _load_schemas says so
        self.upstream = upstream if upstream is not None else find_upstream()
        self._schemas = {}
        self._load_schemas()
        if seed:
            self._seed()

    # ------------------------------------------------------------- lifecycle

    @property
    def port(self) -> int:
        """The TCP port (known once started)."""
        return self._port

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://{self.host}:{self._port}"

    @property
    def running(self) -> bool:
        """Whether the server accepts connections."""
        return self._runner is not None

    def start(self, *, controller: bool = False) -> KubeTestServer:
        """Start serving (and the simulated controller when ``controller``)."""
        with self._lifecycle:
            if self._thread is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                self._loop = loop
                self._thread = threading.Thread(target=run, name="kube-test-server", daemon=True)
                self._thread.start()
                ready.wait()
            if self._runner is None:
                self._call(self._astart())
        if controller and self.controller is not None and not self._controller_started:
            self.controller.start()
            self._controller_started = True
        return self

    def install_kueue(self) -> Any:
        """Install the simulated Kueue (:mod:`kf_trainer_core.testing.kueue`): its
        Workload CRD (from the upstream folder), the visibility API and admission.
        Returns the :class:`~kf_trainer_core.testing.kueue.KueueSimulator` to configure
        queues on. :meth:`reset` uninstalls it."""
        from kf_trainer_core.testing.kueue import KueueSimulator, load_workload_crd

        if self.kueue is None:
            if self.upstream is not None:
                self._schemas[WORKLOADS] = load_workload_crd(self.upstream)
            self.kueue = KueueSimulator(self.store)
            self.kueue.start()
        return self.kueue

    def uninstall_kueue(self) -> None:
        """Remove the simulated Kueue: Kueue paths answer 404 again."""
        if self.kueue is not None:
            self.kueue.stop()
            self.kueue = None
            self._schemas.pop(WORKLOADS, None)

    def stop(self) -> None:
        """Stop serving, end every stream and the controller; the data stays."""
        self.uninstall_kueue()
        self.disable_status_server()
        with self._lifecycle:
            if self._controller_started:
                self._controller.stop()
                self._controller_started = False
            if self._loop is None:
                return
            if self._runner is not None:
                self._call(self._astop(abort=False))
            loop, thread = self._loop, self._thread
            loop.call_soon_threadsafe(loop.stop)
            if thread is not None:
                thread.join(10)
            loop.close()
            self._loop = None
            self._thread = None
            if self._executor is not None:
                self._executor.shutdown(wait=False)
                self._executor = None

    def restart(self, downtime: float = 0.0, *, abort: bool = False) -> None:
        """Simulate an apiserver restart: same port, same data, every open connection
        (watches, log follows, keep-alive) dropped; new connections are refused for
        ``downtime`` seconds. Streams end cleanly, as a graceful apiserver shutdown ends
        them; ``abort=True`` resets their connections instead (a crash)."""
        with self._lifecycle:
            if self._runner is None:
                raise RuntimeError("the server is not running")
            self._call(self._astop(abort=abort))
            if downtime > 0:
                time.sleep(downtime)
            self._call(self._astart())

    def __enter__(self) -> KubeTestServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _astart(self) -> None:
        server = web.Server(self._handle, handler_cancellation=True)
        runner = web.ServerRunner(server, shutdown_timeout=0.5, handle_signals=False)
        await runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self._port))
        sock.listen(1024)
        sock.setblocking(False)
        self._port = sock.getsockname()[1]
        await web.SockSite(runner, sock).start()
        self._runner = runner
        self._fanned_rv = int(self.store.current_resource_version)

    async def _astop(self, *, abort: bool) -> None:
        self._end_watches(abort)
        self._end_log_streams(abort)
        runner, self._runner = self._runner, None
        if runner is not None:
            await asyncio.sleep(0)  # let the streams see their close flag
            await runner.cleanup()

    # ------------------------------------------------------------- state

    @property
    def controller(self) -> Any:
        """The simulated Trainer controller (created on first use), or None when
        :mod:`kf_trainer_core.testing.controller` does not exist (yet)."""
        if self._controller is None:
            try:
                module = importlib.import_module("kf_trainer_core.testing.controller")
            except ModuleNotFoundError as exc:
                if exc.name != "kf_trainer_core.testing.controller":
                    raise
                return None
            self._controller = module.TrainerController(self.store, self.logs)
            self._controller.default_preset = self._default_scenario
        return self._controller

    def reset(self) -> None:
        """Back to a fresh server: objects, logs, faults, the request log and the token
        requirement cleared, open streams ended, the bookmark interval restored, the
        controller reset; namespaces and upstream runtimes seeded again."""
        self.drop_watches()
        self.drop_log_streams()
        self.disable_status_server()
        self.faults.clear()
        self.uninstall_kueue()
        if self._controller is not None:
            self._controller.reset()
        self.store.reset()
        self.logs.reset()
        self._token_check = None
        self.bindings.clear()
        self.bookmark_interval = self.default_bookmark_interval
        self._seed()
        self.requests.clear()

    def _seed(self) -> None:
        for ns in _DEFAULT_NAMESPACES:
            self.store.create(
                NAMESPACES,
                {
                    "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}},
                    "spec": {"finalizers": ["kubernetes"]},
                    "status": {"phase": "Active"},
                },
            )
            self.store.create(SERVICEACCOUNTS, {"metadata": {"name": "default"}}, namespace=ns)
        self.seed_upstream_runtimes()

    def seed_upstream_runtimes(self) -> list[str]:
        """Create (or replace) the default ClusterTrainingRuntimes (``torch-distributed``,
        ...) through the CRD's checks — the upstream files when a folder of them is
        named, else the suite's own definitions of them — and return their names."""
        admit = self._admission("Ignore", [])
        return install_runtimes(self.store, self.upstream, find=False, admission=admit)

    def require_token(self, tokens: set[str] | Callable[[str], bool] | None) -> None:
        """Answer 401 to requests without an accepted bearer token (None: no auth)."""
        if tokens is None:
            self._token_check = None
        elif callable(tokens):
            self._token_check = tokens
        else:
            accepted = frozenset(tokens)
            self._token_check = accepted.__contains__

    def bind(
        self,
        token: str,
        namespace: str,
        rules: tuple[Rule, ...],
        *,
        cluster_rules: tuple[Rule, ...] = (),
        user: str = "system:serviceaccount:default:kf-trainer",
    ) -> None:
        """Make ``token`` a user (``user``) whose rights are RBAC's: a Role of
        ``rules`` bound in ``namespace`` and a ClusterRole of ``cluster_rules`` bound
        cluster-wide (:mod:`kf_trainer_core.k8s.rbac` gives the suite's). A request the
        rules do not allow is answered 403 in the API server's words, a dry run
        included. ``kubeconfig(token=...)`` writes a kubeconfig for the user."""
        self.bindings[token] = Binding(user, namespace, rules, cluster_rules)

    def enable_status_server(self) -> Any:
        """Turn on the Trainer's TrainJob status server (feature gate ``TrainJobStatus``):
        an HTTPS endpoint that writes ``status.trainerStatus`` through the CRD's
        validation, and the controller's injection of its URL, CA and token into trainer
        pods (see :mod:`kf_trainer_core.testing.status_server`). Returns it."""
        from kf_trainer_core.testing.status_server import StatusServer

        if self.status_server is None:
            self.status_server = StatusServer(self.store, self._admission("Strict", []))
        self.status_server.start()
        if self.controller is not None:
            self.controller.status_server = self.status_server
        return self.status_server

    def disable_status_server(self) -> None:
        """Turn the status server off again (pods created later get no variables)."""
        server, self.status_server = self.status_server, None
        if server is not None:
            server.stop()
        if self._controller is not None:
            self._controller.status_server = None

    def forbid(self, verb: str, resource: str, namespace: str | None = None) -> None:
        """Deny ``verb`` on ``resource`` (403, as RBAC would); see :class:`FaultInjector`."""
        self.faults.forbid(verb, resource, namespace)

    def kubeconfig(
        self,
        path: Path | None = None,
        *,
        namespace: str = "default",
        token: str | None = None,
        context: str = "kf-test",
        user: JSON | None = None,
    ) -> Path:
        """Write a kubeconfig for this server and return its path (a temporary file when
        ``path`` is None). ``user`` replaces the user entry (e.g. an ``exec`` plugin)."""
        if not self._port:
            raise RuntimeError("start() the server before asking for a kubeconfig")
        user_entry: JSON = dict(user) if user is not None else {}
        if token is not None and user is None:
            user_entry["token"] = token
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": context, "cluster": {"server": self.url}}],
            "users": [{"name": context, "user": user_entry}],
            "contexts": [
                {
                    "name": context,
                    "context": {"cluster": context, "user": context, "namespace": namespace},
                }
            ],
            "current-context": context,
            "preferences": {},
        }
        if path is None:
            fd, name = tempfile.mkstemp(prefix="kf-test-kubeconfig-", suffix=".yaml")
            path = Path(name)
            with open(fd, "w") as fh:
                yaml.safe_dump(config, fh, sort_keys=False)
        else:
            path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path
