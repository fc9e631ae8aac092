"""Property tests: JSON round-trips, determinism and the name rules hold for any input."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kf_trainer_core.fields import names
from kf_trainer_core.fields.checks import CREDENTIAL_NAMES
from kf_trainer_core.manifest.builder import build_trainjob, render_yaml
from kf_trainer_core.spec import TrainJobSpec

SOURCE = "def train(**kw):\n    return kw\n"

# No PET_ prefix possible; no credential variable (their clear values are refused).
env_names = st.from_regex(r"\A[A-OQ-Z_][A-Z0-9_]{0,15}\Z").filter(
    lambda n: n not in CREDENTIAL_NAMES
)
label_keys = st.from_regex(r"\A[a-z][a-z0-9-]{0,20}[a-z0-9]\Z")
label_values = st.from_regex(r"\A([A-Za-z0-9]([-A-Za-z0-9_.]{0,30}[A-Za-z0-9])?)?\Z")
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**9), 10**9)
    | st.text(max_size=20)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
quantities = st.one_of(
    st.integers(0, 64), st.sampled_from(["500m", "1", "16Gi", "1.5", "2e3", "100M"])
)


@st.composite
def specs(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(
        st.sampled_from(["CustomTrainer", "CustomTrainerContainer", "BuiltinTrainer", None])
    )
    data: dict[str, Any] = {}
    options: list[dict[str, Any]] = []
    if kind == "CustomTrainer":
        data["trainer"] = {
            "type": kind,
            "func": SOURCE,
            "func_args": draw(
                st.dictionaries(st.from_regex(r"\A[a-z]{1,8}\Z"), json_values, max_size=4)
            ),
            "num_nodes": draw(st.none() | st.integers(1, 64)),
            "resources_per_node": draw(
                st.none()
                | st.fixed_dictionaries(
                    {},
                    optional={
                        "cpu": quantities,
                        "memory": quantities,
                        "storage": quantities,
                        # GPUs are whole devices.
                        "gpu": st.integers(0, 64) | st.sampled_from(["1", "2e3", "8"]),
                    },
                )
            ),
            "env": draw(st.dictionaries(env_names, st.text(max_size=30), max_size=4)),
            "packages_to_install": draw(
                st.none() | st.lists(st.sampled_from(["numpy", "pandas<3", "x[y]"]), max_size=3)
            ),
        }
    elif kind == "CustomTrainerContainer":
        data["trainer"] = {
            "type": kind,
            "image": "ghcr.io/x/y:1",
            "num_nodes": draw(st.none() | st.integers(1, 8)),
        }
        if draw(st.booleans()):
            options.append(
                {
                    "type": "TrainerCommand",
                    "command": draw(
                        st.lists(st.text(min_size=1, max_size=10), min_size=1, max_size=4)
                    ),
                }
            )
    elif kind == "BuiltinTrainer":
        data["runtime"] = "torchtune-llama3.2-1b"
        data["trainer"] = {
            "type": kind,
            "config": {
                "epochs": draw(st.none() | st.integers(1, 10)),
                "batch_size": draw(st.none() | st.integers(1, 64)),
            },
        }
    if draw(st.booleans()):
        options.append(
            {
                "type": "Labels",
                "labels": draw(st.dictionaries(label_keys, label_values, max_size=4)),
            }
        )
    if draw(st.booleans()):
        options.append({"type": "ActiveDeadlineSeconds", "seconds": draw(st.integers(1, 10**6))})
    data["options"] = options
    return data


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs())
def test_json_round_trip_and_determinism(data: dict[str, Any]) -> None:
    spec = TrainJobSpec.parse(data)
    again = TrainJobSpec.parse(spec.model_dump_json())
    assert again == spec
    first = build_trainjob(spec, identity="dag/task/run")
    second = build_trainjob(again, identity="dag/task/run")
    assert render_yaml(first.manifest) == render_yaml(second.manifest)
    assert first.spec_hash == second.spec_hash
    assert names.NAME_PATTERN.match(first.name)
    assert len(first.name) <= first.runtime.max_name_length


identity_parts = st.lists(
    st.one_of(st.text(max_size=80), st.integers(), st.none()), min_size=1, max_size=5
)


@settings(max_examples=300, deadline=None)
@given(identity_parts, st.text(max_size=40), st.integers(8, 63))
def test_identity_names_are_valid_stable_and_fit(parts: list[Any], prefix: str, limit: int) -> None:
    name = names.name_from_identity(*parts, prefix=prefix, limit=limit)
    assert names.NAME_PATTERN.match(name), name
    assert len(name) <= limit
    assert name == names.name_from_identity(*parts, prefix=prefix, limit=limit)


@settings(max_examples=200, deadline=None)
@given(identity_parts, identity_parts)
def test_different_identities_give_different_names(a: list[Any], b: list[Any]) -> None:
    key = lambda parts: "/".join("" if p is None else str(p) for p in parts)  # noqa: E731
    if key(a) != key(b):
        assert names.name_from_identity(*a) != names.name_from_identity(*b)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=100), st.integers(8, 63))
def test_fit_name_always_fits(text: str, limit: int) -> None:
    name = names.fit_name(text, limit)
    assert names.NAME_PATTERN.match(name), name
    assert len(name) <= limit
    assert names.name_problem(name, limit) is None


def test_limits_per_runtime_shape() -> None:
    assert names.max_name_length(["dataset-initializer", "node"]) == 33
    assert names.max_name_length(["model-initializer", "node"]) == 35
    assert names.max_name_length(["node", "launcher"]) == 44
    assert names.max_name_length(["node"]) == 48
    assert names.SAFE_MAX_LENGTH == 33
