"""Finding and talking to the container engine (Docker, or Podman's Docker-compatible
API) through the Docker SDK, and getting images by the pull policy."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: How long one engine request may take (pulls excepted).
REQUEST_TIMEOUT = 60


class EngineUnavailable(RuntimeError):
    """No container engine answers where the configuration says to look."""


class ImageUnavailable(RuntimeError):
    """The image is absent and the pull policy or the registry does not give it.
    ``reason`` is the kubelet's (``ErrImageNeverPull``, ``ErrImagePull``)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Engine:
    """A connected engine: the SDK client and which engine it is."""

    client: Any
    name: str  # "docker" or "podman"
    address: str


def candidates(engine: str, host: str | None, environ: Mapping[str, str]) -> list[str]:
    """The addresses to try, in order: ``host``, else ``$DOCKER_HOST`` (docker/auto),
    else the usual sockets of the engine(s) allowed."""
    if host:
        return [host]
    out: list[str] = []
    runtime_dir = environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"
    if engine in ("auto", "docker"):
        if environ.get("DOCKER_HOST"):
            out.append(environ["DOCKER_HOST"])
        out += [
            "unix:///var/run/docker.sock",
            f"unix://{Path.home()}/.docker/run/docker.sock",
            f"unix://{runtime_dir}/docker.sock",
        ]
    if engine in ("auto", "podman"):
        if environ.get("CONTAINER_HOST"):
            out.append(environ["CONTAINER_HOST"])
        out += [f"unix://{runtime_dir}/podman/podman.sock", "unix:///run/podman/podman.sock"]
    return list(dict.fromkeys(out))  # each once, in order


def connect(
    engine: str = "auto", host: str | None = None, environ: Mapping[str, str] | None = None
) -> Engine:
    """The first engine that answers a ping. Raises :class:`EngineUnavailable` naming
    every address tried and the fix."""
    try:
        import docker  # the optional extra `container`
    except ImportError:
        from kf_trainer_core.base.extras import install_hint

        raise EngineUnavailable(
            f"the container backend needs the Docker SDK. Fix: {install_hint('container')} "
            "(or pip install docker)."
        ) from None
    env = os.environ if environ is None else environ
    tried: list[str] = []
    for address in candidates(engine, host, env):
        if address.startswith("unix://") and not Path(address[len("unix://") :]).exists():
            tried.append(f"{address} (no such socket)")
            continue
        try:
            client = docker.DockerClient(base_url=address, timeout=REQUEST_TIMEOUT)
            client.ping()
            version = client.version()
        except Exception as exc:  # the SDK raises requests' and its own errors
            tried.append(f"{address} ({type(exc).__name__})")
            continue
        components = " ".join(str(c.get("Name", "")) for c in version.get("Components") or [])
        name = "podman" if "podman" in components.lower() else "docker"
        if engine != "auto" and name != engine:
            client.close()
            tried.append(f"{address} (is {name}, not {engine})")
            continue
        return Engine(client, name, address)
    raise EngineUnavailable(
        f"no {'container engine' if engine == 'auto' else engine} answers (tried "
        + "; ".join(tried)
        + "). Fix: start the engine (e.g. `sudo systemctl start docker`, "
        "`systemctl --user start podman.socket`), or set the backend configuration's "
        '"host" (ContainerConfig(host=...)) to its API address.'
    )


def ensure_image(client: Any, image: str, policy: str) -> None:
    """Make ``image`` present per the pull policy (``IfNotPresent``, ``Always``,
    ``Never``), as the kubelet does before it creates a container."""
    import docker.errors

    present = True
    if policy != "Always":
        try:
            client.images.get(image)
        except docker.errors.ImageNotFound:
            present = False
        if present:
            return
        if policy == "Never":
            raise ImageUnavailable(
                "ErrImageNeverPull",
                f'Container image "{image}" is not present with pull policy of Never. Fix: '
                f"build or load it (docker pull/load {image}), or use "
                "ContainerConfig(pull_policy='IfNotPresent').",
            )
    repo, tag = _split(image)
    try:
        client.images.pull(repo, tag=tag)
    except docker.errors.APIError as exc:
        raise ImageUnavailable(
            "ErrImagePull",
            f'Failed to pull image "{image}": {exc.explanation or exc}. Fix: check the '
            "image name and the engine's registry access, or load the image locally.",
        ) from None


def _split(image: str) -> tuple[str, str | None]:
    if "@" in image:
        return image, None
    name, _, tag = image.rpartition(":")
    if name and "/" not in tag:
        return name, tag
    return image, "latest"
