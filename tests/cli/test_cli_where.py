"""Where the command works comes from the core's configuration models: a backend the
core adds later is usable with ``--backend NAME`` and the flags its model has, with no
change to the command."""

from __future__ import annotations

from typing import Annotated, Literal

import click
import pytest
from pydantic import Field

from kf_trainer_core import config
from kf_trainer_core.cli._errors import CliError
from kf_trainer_core.cli._where import backend_config
from kf_trainer_core.fields._model import SpecModel


class _FakeConfig(SpecModel):
    backend: Literal["fake"] = "fake"
    state_dir: str | None = None
    namespace: str = "fake"


def _where(**given: str) -> click.Context:
    ctx = click.Context(click.Command("kf-trainer"))
    ctx.meta["kf_where"] = dict(given)
    return ctx


def test_a_backend_added_to_the_core_needs_no_cli_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    union = Annotated[
        config.KubernetesConfig | config.LocalConfig | _FakeConfig,
        Field(discriminator="backend"),
    ]
    monkeypatch.setattr(config, "BackendConfig", union)
    monkeypatch.delenv("KF_TRAINER_BACKEND", raising=False)
    made = backend_config(_where(backend="fake", state_dir="/tmp/x", namespace="team-a"))
    assert isinstance(made, _FakeConfig)
    assert (made.state_dir, made.namespace) == ("/tmp/x", "team-a")
    with pytest.raises(CliError, match="--context does not apply to the fake backend"):
        backend_config(_where(backend="fake", context="gpu"))


def test_flags_override_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KF_TRAINER_BACKEND", '{"backend": "local", "state_dir": "/a"}')
    assert backend_config(_where()).state_dir == "/a"
    assert backend_config(_where(state_dir="/b")).state_dir == "/b"
    # Another backend does not inherit the environment's local settings.
    made = backend_config(_where(backend="kubernetes", namespace="team-a"))
    assert isinstance(made, config.KubernetesConfig)
    assert made.namespace == "team-a"
