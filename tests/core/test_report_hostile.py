"""``report()`` against status servers that misbehave (issue 24, defects 3, 11, 17): a
server that trickles its answer cannot hold the end of training; the token goes only
over TLS verified with the injected CA, to the server named, never through a redirect;
long metric names never merge; each state is POSTed once."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kf_trainer_core import report as rp
from kf_trainer_core.testing.certs import issue

TOKEN = "the-projected-token"


@dataclass
class Server:
    """A TLS (or plain) server on 127.0.0.1 that answers each connection with
    ``answer(conn)`` and records what reached it."""

    port: int
    requests: list[bytes] = field(default_factory=list)
    finished: threading.Event = field(default_factory=threading.Event)

    def url(self, scheme: str = "https") -> str:
        return f"{scheme}://127.0.0.1:{self.port}/apis/x/status"


def _read_request(conn: socket.socket) -> bytes:
    """The whole request: headers, then as many body bytes as Content-Length says."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    issued = issue("kf-trainer-status-server", hosts=("127.0.0.1", "localhost"))
    (tmp_path / "ca.crt").write_bytes(issued.cert)
    (tmp_path / "key.pem").write_bytes(issued.key)
    (tmp_path / "token").write_text(TOKEN)
    stop = threading.Event()
    listeners: list[socket.socket] = []

    def start(answer: Callable[[socket.socket, Server], None], tls: bool = True) -> Server:
        listener = socket.create_server(("127.0.0.1", 0))
        listener.settimeout(0.2)
        listeners.append(listener)
        server = Server(listener.getsockname()[1])
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(tmp_path / "ca.crt", tmp_path / "key.pem")

        def loop() -> None:
            while not stop.is_set():
                try:
                    raw, _ = listener.accept()
                except (TimeoutError, OSError):
                    continue
                try:
                    conn = context.wrap_socket(raw, server_side=True) if tls else raw
                    conn.settimeout(10)
                    server.requests.append(_read_request(conn))
                    answer(conn, server)
                    conn.close()
                except OSError:
                    pass

        threading.Thread(target=loop, daemon=True).start()
        return server

    yield start
    stop.set()
    for listener in listeners:
        listener.close()


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    def setup(url: str) -> None:
        monkeypatch.setenv(rp.URL_ENV, url)
        monkeypatch.setenv(rp.TOKEN_ENV, str(tmp_path / "token"))
        monkeypatch.setenv(rp.CA_CERT_ENV, str(tmp_path / "ca.crt"))

    return setup


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> rp._Reporter:
    for var in ("RANK", "PET_NODE_RANK", "JOB_COMPLETION_INDEX", "OMPI_COMM_WORLD_RANK"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv(rp.INTERVAL_ENV, "3600")
    reporter = rp._Reporter()
    reporter.enabled = True
    monkeypatch.setattr(rp, "_REPORTER", reporter)
    return reporter


def _trickle(conn: socket.socket, server: Server) -> None:
    """One byte of an answer's headers every half second for 30 s (the answer never
    ends before ``finished``): a per-read timeout never fires."""
    for byte in b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 8:
        try:
            conn.sendall(bytes([byte]))
        except OSError:
            return  # the client gave up: what we want
        if server.finished.wait(0.5):
            return
    server.finished.set()


def test_a_trickling_server_cannot_hold_the_end_of_training(
    fresh: rp._Reporter, serve: Callable[..., Server], env: Callable[[str], None]
) -> None:
    server = serve(_trickle)
    env(server.url())
    # A POST of the daemon thread is under way and trickling when the function returns.
    rp.report(progress=10)
    rp.report(progress=100)
    rp.flush(timeout=1.0)
    # flush returned while the server was still trickling its first answer.
    assert not server.finished.is_set()
    assert server.requests  # it did reach the server (then gave up on the answer)
    assert rp._post(server.url(), {"x": 1}, 0.5) is not None
    assert not server.finished.is_set()
    server.finished.set()


def _ok(conn: socket.socket, server: Server) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")


def test_the_token_goes_over_verified_tls_only(
    serve: Callable[..., Server], env: Callable[[str], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    good = serve(_ok)
    env(good.url())
    assert rp._post(good.url(), {"p": 1}, 5) is None
    assert TOKEN.encode() in good.requests[-1]
    # Plain http: nothing is sent at all.
    plain = serve(_ok, tls=False)
    assert "https" in (rp._post(plain.url("http"), {"p": 1}, 5) or "")
    assert plain.requests == []
    # The CA file missing: no fallback to the system's CAs, nothing sent.
    monkeypatch.setenv(rp.CA_CERT_ENV, "/nonexistent/ca.crt")
    before = len(good.requests)
    assert "CA" in (rp._post(good.url(), {"p": 1}, 5) or "")
    assert len(good.requests) == before


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_redirect_is_never_followed(
    serve: Callable[..., Server], env: Callable[[str], None], code: int
) -> None:
    elsewhere = serve(_ok)

    def redirect(conn: socket.socket, server: Server) -> None:
        conn.sendall(
            f"HTTP/1.1 {code} Moved\r\nLocation: ".encode()
            + elsewhere.url().encode()
            + b"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )

    first = serve(redirect)
    env(first.url())
    assert rp._post(first.url(), {"p": 1}, 5) == f"HTTP {code}"
    assert len(first.requests) == 1
    assert elsewhere.requests == []  # the token never went to the other port


def test_long_metric_names_never_merge(
    fresh: rp._Reporter, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(rp.ENABLE_ENV, "1")
    stem = "validation/" + "x" * 60
    rp.report(metrics={stem + "/loss": 1, stem + "/accuracy": 2, "short": 3})
    rp.report(metrics={stem + "/loss": 4})
    names = {m["name"]: m["value"] for m in fresh.snapshot()["metrics"]}
    assert len(names) == 3
    assert all(len(n) <= rp.MAX_TEXT for n in names)
    assert sorted(names.values()) == ["2", "3", "4"]
    err = capsys.readouterr().err
    assert err.count("longer than 64") == 1  # said once
    rp.report(metrics={f"m{i}": i for i in range(300)})
    assert len(fresh.snapshot()["metrics"]) == rp.MAX_METRICS
    assert capsys.readouterr().err.count(f"more than {rp.MAX_METRICS}") == 1


def test_report_then_flush_posts_the_state_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon thread and the final flush race for the same state: it goes out once,
    whichever wins."""
    monkeypatch.setenv(rp.URL_ENV, "https://127.0.0.1:9/status")
    monkeypatch.setenv(rp.INTERVAL_ENV, "0")
    for var in ("RANK", "PET_NODE_RANK", "JOB_COMPLETION_INDEX", "OMPI_COMM_WORLD_RANK"):
        monkeypatch.delenv(var, raising=False)
    posted: list[object] = []
    lock = threading.Lock()

    def post(url: str, status: dict[str, object], timeout: float) -> None:
        with lock:
            posted.append(status.get("progressPercentage"))

    monkeypatch.setattr(rp, "_post", post)
    for attempt in range(20):
        reporter = rp._Reporter()
        monkeypatch.setattr(rp, "_REPORTER", reporter)
        posted.clear()
        rp.report(progress=attempt)
        if attempt % 2:
            # The daemon thread wins the race: it has sent the state when flush runs.
            for _ in range(500):
                if posted:
                    break
                threading.Event().wait(0.01)
        rp.flush()
        reporter.wake.set()  # whatever the thread would still send, it sends now
        threading.Event().wait(0.02)
        with reporter.send_lock:
            assert posted == [attempt], f"attempt {attempt}: {posted}"
