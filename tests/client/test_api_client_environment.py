"""The API client reads the environment once, when it is made, not on every request:
the proxy for the API server comes from ``HTTPS_PROXY``/``HTTP_PROXY``/``NO_PROXY`` (or the
kubeconfig's ``proxy-url``), and ``~/.netrc`` is not read, as kubectl does not read it.
The library's session read both per request through two worker threads (a third of a
sequential submit's rate, two thirds of ten concurrent reads'), and a ``.netrc`` entry
for the API server's host made every request with a bearer token fail."""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import json
import socketserver
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.config import KubernetesConfig
from kf_trainer_core.testing.server import KubeTestServer

TOKEN = "tok-5d1e"


class CountingExecutor(concurrent.futures.ThreadPoolExecutor):
    """The loop's default executor, counting what is handed to its threads."""

    handed = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        self.handed += 1
        return super().submit(fn, *args, **kwargs)


def test_requests_hand_nothing_to_a_worker_thread(kubeconfig_path: Path) -> None:
    async def main() -> tuple[int, int]:
        executor = CountingExecutor(max_workers=2)
        asyncio.get_running_loop().set_default_executor(executor)
        config = KubernetesConfig(kubeconfig=str(kubeconfig_path))
        async with AsyncTrainerClient(config) as client:
            await client.list_jobs()  # the connection is made (in a worker thread)
            made = executor.handed
            for _ in range(10):
                await client.list_jobs()
            return made, executor.handed

    made, after = asyncio.run(main())
    assert made >= 1
    assert after == made, f"{after - made} hand-offs to a worker thread for 10 requests"


def test_a_netrc_entry_for_the_api_server_breaks_nothing(
    kube: KubeTestServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login someone password not-for-kubernetes\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    kube.require_token({TOKEN})
    kubeconfig = kube.kubeconfig(tmp_path / "kubeconfig", token=TOKEN)
    with TrainerClient(KubernetesConfig(kubeconfig=str(kubeconfig))) as client:
        assert client.list_jobs() == []
    assert kube.requests.count(status=401) == 0


class _Proxy(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        self.seen: list[tuple[str, str | None]] = []


class _ProxyHandler(socketserver.StreamRequestHandler):
    """A forward proxy that answers every request itself: an empty TrainJob list."""

    server: _Proxy

    def handle(self) -> None:
        request_line = self.rfile.readline().decode().strip()
        auth = None
        while (line := self.rfile.readline().decode()) not in ("\r\n", "\n", ""):
            key, _, value = line.partition(":")
            if key.strip().lower() == "proxy-authorization":
                auth = value.strip()
        self.server.seen.append((request_line, auth))
        body = json.dumps(
            {
                "apiVersion": "trainer.kubeflow.org/v1alpha1",
                "kind": "TrainJobList",
                "metadata": {"resourceVersion": "1"},
                "items": [],
            }
        ).encode()
        self.wfile.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )


@pytest.fixture
def no_proxy_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture
def proxy(no_proxy_settings: None) -> Iterator[_Proxy]:
    """The recording proxy, with no proxy setting of the machine's in the environment."""
    server = _Proxy()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def listed_through(proxy: _Proxy, proxy_userinfo: str, kubeconfig_path: Path) -> None:
    """Point ``HTTP_PROXY`` at ``proxy`` and list the jobs (an empty list)."""
    host, port = proxy.server_address[:2]
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HTTP_PROXY", f"http://{proxy_userinfo}{host}:{port}")
        with TrainerClient(KubernetesConfig(kubeconfig=str(kubeconfig_path))) as client:
            assert client.list_jobs() == []
            assert client.list_jobs() == []


def test_the_environments_proxy_carries_the_requests(kubeconfig_path: Path, proxy: _Proxy) -> None:
    listed_through(proxy, "user:pw@", kubeconfig_path)
    credentials = base64.b64encode(b"user:pw").decode()
    assert proxy.seen
    for request_line, auth in proxy.seen:
        # A forward proxy is asked for the absolute URL of the API server.
        assert request_line.startswith("GET http://127.0.0.1:"), request_line
        assert auth == f"Basic {credentials}"


def test_no_proxy_goes_around_it(
    kube: KubeTestServer, kubeconfig_path: Path, proxy: _Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    listed_through(proxy, "", kubeconfig_path)
    assert proxy.seen == []
    assert kube.requests.count(verb="list", resource="trainjobs") >= 1


def test_an_https_servers_proxy_credentials_stay_on_the_tunnel(
    no_proxy_settings: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through a proxy, an ``https`` API server's requests travel inside a tunnel: the
    proxy's credentials belong on its ``CONNECT``, never on the requests, which the
    API server reads."""
    import kubernetes_asyncio

    from kf_trainer_core.k8s.api_client import new_api_client

    monkeypatch.setenv("HTTPS_PROXY", "http://user:pw@127.0.0.1:3128")
    configuration = kubernetes_asyncio.client.Configuration(host="https://kube.example:6443")

    async def main() -> dict[str, str]:
        client = await new_api_client(kubernetes_asyncio, configuration)
        try:
            return dict(client.rest_client.pool_manager.headers)
        finally:
            await client.close()

    session_headers = asyncio.run(main())
    credentials = base64.b64encode(b"user:pw").decode()
    assert configuration.proxy == "http://127.0.0.1:3128"
    assert configuration.proxy_headers == {"Proxy-Authorization": f"Basic {credentials}"}
    assert "Proxy-Authorization" not in session_headers
