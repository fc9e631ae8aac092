"""The Trainer's TrainJob status server (feature gate ``TrainJobStatus``), for the
Kubernetes-API test server.

What it does, as upstream (kubeflow/trainer ``pkg/statusserver``,
``pkg/runtime/framework/plugins/trainjobstatus``) does it:

* HTTPS only, with its own certificate (here a self-signed one, made at start);
* ``POST /apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs/{name}/status``
  with ``Authorization: Bearer <token>``, where the token is the projected
  service-account token whose audience names that very TrainJob (here: a random token
  issued per TrainJob); another job's token, or none, is ``403 Forbidden``;
* a body ``{"trainerStatus": {...}}`` of at most 64 KiB; one that does not decode is
  ``422``; without ``trainerStatus`` it is answered ``200`` and changes nothing;
* otherwise ``status.trainerStatus`` is replaced as a whole (a server-side apply with
  one field owner), through the CRD's validation (``422`` with the API's message, e.g.
  a metric value over 64 characters or no ``lastUpdatedTime``), ``404`` for a TrainJob
  that does not exist; the answer echoes the request;
* the controller injects ``KUBEFLOW_TRAINER_SERVER_URL``, ``…_CA_CERT`` and ``…_TOKEN``
  (the latter two are paths under ``/var/run/secrets/kubeflow/trainer``, a projected
  volume) into every trainer container. In the test server's ``exec`` mode those files
  are written into the run's work directory instead.

Turn it on with :meth:`KubeTestServer.enable_status_server`.
"""

from __future__ import annotations

import json
import re
import secrets
import ssl
import tempfile
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from kf_trainer_core.k8s.errors import status_body
from kf_trainer_core.k8s.resources import TRAINJOBS
from kf_trainer_core.report import CA_CERT_ENV, TOKEN_ENV, URL_ENV
from kf_trainer_core.testing.store import Admission, Store, StoreError

JSON = dict[str, Any]

#: Where the Trainer mounts the CA certificate and the projected token.
MOUNT_PATH = "/var/run/secrets/kubeflow/trainer"
CA_FILE, TOKEN_FILE = "ca.crt", "token"
VOLUME_NAME = "kubeflow-trainer-token"
#: Upstream's token audience prefix and its status endpoint's path.
AUDIENCE_PREFIX = "trainer.kubeflow.org"
_PATH = re.compile(
    r"^/apis/trainer\.kubeflow\.org/v1alpha1/namespaces/([^/]+)/trainjobs/([^/]+)/status\Z"
)
#: Upstream's ``maxBodySize``.
MAX_BODY = 1 << 16


def status_path(namespace: str, name: str) -> str:
    """The endpoint's path for one TrainJob."""
    return f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"


def token_audience(namespace: str, name: str) -> str:
    """The audience a job's projected token is issued for."""
    return f"{AUDIENCE_PREFIX}/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"


@dataclass(frozen=True)
class Post:
    """One request the status server answered."""

    namespace: str
    name: str
    code: int
    trainer_status: JSON | None


class StatusServer:
    """The status server on ``host`` (an ephemeral port), writing into ``store``.

    ``admission`` is the API server's CRD validation of a status write. Tests read
    :attr:`posts`, issue tokens with :meth:`token_for`, and make it refuse every token
    with :attr:`refuse_tokens` or stop it (:meth:`stop`) to see training carry on."""

    def __init__(
        self, store: Store, admission: Admission | None = None, *, host: str = "127.0.0.1"
    ) -> None:
        self.store = store
        self.admission = admission
        self.host = host
        self.refuse_tokens = False
        self.posts: list[Post] = []
        self._tokens: dict[str, tuple[str, str]] = {}
        self._lock = threading.Lock()
        self._dir = Path(tempfile.mkdtemp(prefix="kf-status-server-"))
        # Lazily: cryptography is paid for only by a test that turns the server on.
        from kf_trainer_core.testing.certs import issue

        issued = issue("kf-trainer-status-server", hosts=(host, "localhost"))
        self.ca_pem = issued.cert
        (self._dir / "tls.crt").write_bytes(issued.cert)
        (self._dir / "tls.key").write_bytes(issued.key)
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._port = 0

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> StatusServer:
        """Serve (on the port it had before, after a :meth:`stop`)."""
        if self._httpd is not None:
            return self
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self._dir / "tls.crt", self._dir / "tls.key")
        httpd = ThreadingHTTPServer((self.host, self._port), _handler_for(self))
        httpd.daemon_threads = True
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
        self._port = httpd.server_address[1]
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, name="kf-status-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving: reporters get connection errors (the port stays reserved for
        :meth:`start` only as long as nothing else takes it)."""
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    @property
    def running(self) -> bool:
        return self._httpd is not None

    # ------------------------------------------------------------------ what pods get

    @property
    def base_url(self) -> str:
        """``https://HOST:PORT``."""
        return f"https://{self.host}:{self._port}"

    def url_for(self, namespace: str, name: str) -> str:
        """``KUBEFLOW_TRAINER_SERVER_URL`` of one TrainJob."""
        return self.base_url + status_path(namespace, name)

    def token_for(self, namespace: str, name: str) -> str:
        """The job's projected token (the same one for every pod of the job)."""
        with self._lock:
            for token, job in self._tokens.items():
                if job == (namespace, name):
                    return token
            token = secrets.token_urlsafe(24)
            self._tokens[token] = (namespace, name)
            return token

    def enforce_pod_spec(
        self, pod_spec: JSON, containers: list[JSON], namespace: str, name: str
    ) -> None:
        """What the ``TrainJobStatus`` plugin adds to the trainer's pod template: the
        three variables, the projected volume and its mount, in every container."""
        env = [
            {"name": URL_ENV, "value": self.url_for(namespace, name)},
            {"name": CA_CERT_ENV, "value": f"{MOUNT_PATH}/{CA_FILE}"},
            {"name": TOKEN_ENV, "value": f"{MOUNT_PATH}/{TOKEN_FILE}"},
        ]
        for c in containers:
            current = [
                e for e in c.get("env") or [] if e.get("name") not in {e["name"] for e in env}
            ]
            c["env"] = current + env
            mounts = [m for m in c.get("volumeMounts") or [] if m.get("name") != VOLUME_NAME]
            c["volumeMounts"] = [
                *mounts,
                {"name": VOLUME_NAME, "mountPath": MOUNT_PATH, "readOnly": True},
            ]
        volumes = [v for v in pod_spec.get("volumes") or [] if v.get("name") != VOLUME_NAME]
        pod_spec["volumes"] = [
            *volumes,
            {
                "name": VOLUME_NAME,
                "projected": {
                    "sources": [
                        {
                            "serviceAccountToken": {
                                "audience": token_audience(namespace, name),
                                "expirationSeconds": 3600,
                                "path": TOKEN_FILE,
                            }
                        },
                        {
                            "configMap": {
                                "name": f"{name}-tls-config",
                                "items": [{"key": "ca.crt", "path": CA_FILE}],
                            }
                        },
                    ]
                },
            },
        ]

    def exec_env(self, workdir: Path, namespace: str, name: str) -> dict[str, str]:
        """For a container run as a local process: the mounted files written into its
        work directory, and the variables pointing there."""
        folder = workdir / "kubeflow-trainer"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / CA_FILE).write_bytes(self.ca_pem)
        (folder / TOKEN_FILE).write_text(self.token_for(namespace, name))
        return {
            URL_ENV: self.url_for(namespace, name),
            CA_CERT_ENV: str(folder / CA_FILE),
            TOKEN_ENV: str(folder / TOKEN_FILE),
        }

    # ------------------------------------------------------------------ requests

    def handle(self, method: str, path: str, authorization: str, body: bytes) -> tuple[int, JSON]:
        """Answer one request: ``(HTTP code, JSON body)``."""
        match = _PATH.match(path.split("?", 1)[0])
        if method != "POST" or match is None:
            return _failure(404, "NotFound", "Not found")
        namespace, name = match.group(1), match.group(2)
        parts = authorization.split()
        token = parts[1] if len(parts) == 2 and parts[0].lower() == "bearer" else ""
        with self._lock:
            owner = self._tokens.get(token)
        if self.refuse_tokens or owner != (namespace, name):
            return self._record(namespace, name, _failure(403, "Forbidden", "Forbidden"), None)
        try:
            request = json.loads(body)
            if not isinstance(request, dict):
                raise ValueError("not an object")
            status = request.get("trainerStatus")
            if status is not None and not isinstance(status, dict):
                raise ValueError("trainerStatus is not an object")
        except ValueError:
            return self._record(namespace, name, _failure(422, "Invalid", "Invalid payload"), None)
        if status is None:
            return self._record(namespace, name, (200, request), None)
        try:
            self._write(namespace, name, status)
        except StoreError as err:
            if err.code == 404:
                answer = _failure(404, "NotFound", "Train job not found")
            elif err.code in (400, 422):
                answer = _failure(422, "Invalid", err.message)
            else:
                answer = _failure(500, "InternalError", "Internal error")
            return self._record(namespace, name, answer, status)
        return self._record(namespace, name, (200, request), status)

    def _write(self, namespace: str, name: str, status: JSON) -> None:
        for _ in range(10):
            obj = self.store.get(TRAINJOBS, namespace, name)
            obj.setdefault("status", {})["trainerStatus"] = status
            try:
                self.store.update(TRAINJOBS, obj, subresource="status", admission=self.admission)
                return
            except StoreError as err:
                if err.code != 409:
                    raise
        raise StoreError(500, "InternalError", "conflicts")

    def _record(
        self, namespace: str, name: str, answer: tuple[int, JSON], status: JSON | None
    ) -> tuple[int, JSON]:
        with self._lock:
            self.posts.append(Post(namespace, name, answer[0], status))
        return answer

    def posts_for(self, name: str, code: int | None = 200) -> list[Post]:
        """The requests about one TrainJob (only those answered ``code``; None: all)."""
        with self._lock:
            return [p for p in self.posts if p.name == name and (code is None or p.code == code)]


def _failure(code: int, reason: str, message: str) -> tuple[int, JSON]:
    return code, status_body(code, reason, message)


def _handler_for(server: StatusServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                code, body = _failure(413, "RequestEntityTooLarge", "Request body too large")
            else:
                raw = self.rfile.read(length) if length else b""
                code, body = server.handle(
                    self.command, self.path, self.headers.get("Authorization") or "", raw
                )
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_POST = do_GET = do_PUT = do_PATCH = do_DELETE = _answer

        def log_message(self, format: str, *args: Any) -> None:
            return  # the test server's own request log is enough

    return Handler
