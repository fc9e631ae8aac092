"""Tests for kf_trainer_core.testing.crd: CRD defaulting, pruning and validation.

Tests marked by the ``crds`` fixtures read the real upstream CRDs from the shared data
folder (``<repo>/../shared/upstream`` or ``$KF_TRAINER_UPSTREAM``) and skip when it is
missing; the rest use a small synthetic CRD and always run.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kf_trainer_core.k8s.resources import TRAINJOBS as TJ
from kf_trainer_core.testing.crd import (
    OMIT,
    UPSTREAM_ENV,
    CELCompileError,
    CRDSchema,
    FieldError,
    evaluate_rule,
    find_upstream,
    format_invalid,
    format_unknown_fields,
    invalid_status,
    load_upstream_crds,
)

TRAINJOBS = "trainjobs.trainer.kubeflow.org"
RUNTIMES = "trainingruntimes.trainer.kubeflow.org"
CLUSTER_RUNTIMES = "clustertrainingruntimes.trainer.kubeflow.org"
JOBSETS = "jobsets.jobset.x-k8s.io"
NOT_CHECKED = (
    "<nil>: Invalid value: null: some validation rules were not checked because the "
    "object was invalid; correct the existing errors to complete validation"
)

# --------------------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def upstream() -> Path:
    folder = find_upstream()
    if folder is None:
        pytest.skip(
            "upstream data folder missing: expected <repo>/../shared/upstream "
            f"or ${UPSTREAM_ENV} (real Kubeflow Trainer / JobSet CRDs)"
        )
    return folder


@pytest.fixture(scope="module")
def crds(upstream: Path) -> dict[str, CRDSchema]:
    return load_upstream_crds(upstream)


@pytest.fixture(scope="module")
def main_crds(upstream: Path) -> dict[str, CRDSchema]:
    return load_upstream_crds(upstream, branch="main")


@pytest.fixture(scope="module")
def trainjob(crds: dict[str, CRDSchema]) -> CRDSchema:
    return crds[TRAINJOBS]


def new_trainjob(name: str = "my-job") -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": "default", "labels": {"team": "ml"}},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {
                "image": "docker.io/pytorch/pytorch:2.5.0",
                "numNodes": 2,
                "command": ["torchrun", "train.py"],
                "env": [{"name": "EPOCHS", "value": "3"}, {"name": "LR", "value": "0.1"}],
                "resourcesPerNode": {"limits": {"nvidia.com/gpu": 1, "cpu": "4"}},
            },
            "initializer": {"dataset": {"storageUri": "hf://datasets/tiny"}},
        },
    }


def messages(errors: list[FieldError]) -> list[str]:
    return [str(e) for e in errors]


# --------------------------------------------------------------------------------------
# Upstream discovery and loading
# --------------------------------------------------------------------------------------


def test_find_upstream_honours_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(UPSTREAM_ENV, str(tmp_path))
    assert find_upstream() == tmp_path
    monkeypatch.setenv(UPSTREAM_ENV, str(tmp_path / "absent"))
    assert find_upstream() is None


def test_find_upstream_walks_up_to_sibling_shared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(UPSTREAM_ENV, raising=False)
    deep = tmp_path / "repo" / "src" / "pkg"
    deep.mkdir(parents=True)
    before = find_upstream(deep)  # None, unless some ancestor of tmp_path has one
    (tmp_path / "shared" / "upstream").mkdir(parents=True)
    assert find_upstream(deep) == (tmp_path / "shared" / "upstream").resolve()
    assert before is None or not before.is_relative_to(tmp_path)


def test_load_upstream_crds(crds: dict[str, CRDSchema], main_crds: dict[str, CRDSchema]) -> None:
    assert set(crds) == {TRAINJOBS, RUNTIMES, CLUSTER_RUNTIMES, JOBSETS}
    assert set(main_crds) == set(crds)
    tj = crds[TRAINJOBS]
    assert (tj.group, tj.kind, tj.plural, tj.singular, tj.list_kind) == (
        "trainer.kubeflow.org",
        "TrainJob",
        "trainjobs",
        "trainjob",
        "TrainJobList",
    )
    assert tj.namespaced
    assert tj.has_status_subresource
    assert tj.version == "v1alpha1"
    assert tj.api_version == "trainer.kubeflow.org/v1alpha1"
    assert not crds[CLUSTER_RUNTIMES].namespaced
    assert not crds[CLUSTER_RUNTIMES].has_status_subresource
    assert crds[JOBSETS].version == "v1alpha2"
    # cached: loading twice gives the same objects
    assert load_upstream_crds(find_upstream())[TRAINJOBS] is tj
    with pytest.raises(ValueError, match="unknown branch"):
        load_upstream_crds(find_upstream(), branch="v9")


def test_load_upstream_crds_without_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_upstream_crds(tmp_path / "nothing-here")


def test_schema_at(trainjob: CRDSchema) -> None:
    num_nodes = trainjob.schema_at("spec.trainer.numNodes")
    assert num_nodes is not None
    assert (num_nodes["type"], num_nodes["format"]) == ("integer", "int32")
    manager = trainjob.schema_at("spec.runtimePatches[0].manager")
    assert manager is not None
    assert manager["maxLength"] == 253
    assert trainjob.schema_at("spec.runtimePatches[].manager") == manager
    limit = trainjob.schema_at("spec.trainer.resourcesPerNode.limits[cpu]")
    assert limit is not None
    assert limit["x-kubernetes-int-or-string"] is True
    assert trainjob.schema_at("spec.nope") is None


# --------------------------------------------------------------------------------------
# Every CEL rule of every CRD compiles and evaluates as Kubernetes would
# --------------------------------------------------------------------------------------

_ROOT_NAME = "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')"
_STORAGE_URI = "self == '' || self.matches('^[A-Za-z][A-Za-z0-9+.-]*://.+$')"
_MANAGED_BY = "self in ['trainer.kubeflow.org/trainjob-controller', 'kueue.x-k8s.io/multikueue']"
_ONE_POLICY = (
    "[has(self.torch), has(self.mpi), has(self.jax), has(self.xgboost),has(self.flux)]"
    ".filter(x, x).size() <= 1"
)
_STARTUP = (
    "!(has(self.startupPolicy) && self.startupPolicy.startupPolicyOrder == 'InOrder' "
    "&& self.replicatedJobs.exists(x, has(x.dependsOn)))"
)
_NO_NAMESPACE = (
    "self.templates.all(t, !has(t.metadata.namespace) || size(t.metadata.namespace) == 0)"
)
_DEPENDS = [{"name": "init", "status": "Complete"}]

# rule text -> (self, oldSelf or OMIT, expected outcome) cases; every rule of every CRD
# must appear here, so a new upstream rule fails test_every_rule_has_cases loudly.
RULE_CASES: dict[str, list[tuple[Any, Any, bool]]] = {
    _ROOT_NAME: [
        ({"metadata": {"name": "job-1"}}, OMIT, True),
        ({"metadata": {"name": "a"}}, OMIT, True),
        ({"metadata": {"name": "Job"}}, OMIT, False),
        ({"metadata": {"name": "1job"}}, OMIT, False),
        ({"metadata": {"name": "job-"}}, OMIT, False),
        ({"metadata": {"name": "a.b"}}, OMIT, False),
        ({"metadata": {"name": "job\n"}}, OMIT, False),
    ],
    "size(self.metadata.name) <= 63": [
        ({"metadata": {"name": "a" * 63}}, OMIT, True),
        ({"metadata": {"name": "a" * 64}}, OMIT, False),
    ],
    "self == oldSelf": [
        ("a", "a", True),
        ("a", "b", False),
    ],
    _STORAGE_URI: [
        ("", OMIT, True),
        ("s3://bucket/key", OMIT, True),
        ("hf://org/model", OMIT, True),
        ("bucket/key", OMIT, False),
        ("hf://", OMIT, False),
        ("3s://x", OMIT, False),
    ],
    _MANAGED_BY: [
        ("trainer.kubeflow.org/trainjob-controller", OMIT, True),
        ("kueue.x-k8s.io/multikueue", OMIT, True),
        ("example.com/other", OMIT, False),
    ],
    "has(self.lastUpdatedTime)": [
        ({"lastUpdatedTime": "2026-01-02T03:04:05Z", "progressPercentage": 5}, OMIT, True),
        ({"progressPercentage": 5}, OMIT, False),
    ],
    _ONE_POLICY: [
        ({}, OMIT, True),
        ({"numNodes": 2, "torch": {}}, OMIT, True),
        ({"torch": {}, "mpi": {}}, OMIT, False),
    ],
    "self >= 1": [(1, OMIT, True), (8, OMIT, True), (0, OMIT, False)],
    "!self.exists(c, c == 'node')": [
        ([], OMIT, True),
        (["launcher", "sidecar"], OMIT, True),
        (["launcher", "node"], OMIT, False),
    ],
    _STARTUP: [
        ({"replicatedJobs": [{"name": "node", "dependsOn": _DEPENDS}]}, OMIT, True),
        (
            {
                "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
                "replicatedJobs": [{"name": "node", "dependsOn": _DEPENDS}],
            },
            OMIT,
            True,
        ),
        (
            {
                "startupPolicy": {"startupPolicyOrder": "InOrder"},
                "replicatedJobs": [{"name": "node"}],
            },
            OMIT,
            True,
        ),
        (
            {
                "startupPolicy": {"startupPolicyOrder": "InOrder"},
                "replicatedJobs": [{"name": "init"}, {"name": "node", "dependsOn": _DEPENDS}],
            },
            OMIT,
            False,
        ),
    ],
    _NO_NAMESPACE: [
        ({"templates": [{"metadata": {"name": "cache"}}]}, OMIT, True),
        ({"templates": [{"metadata": {"namespace": ""}}]}, OMIT, True),
        ({"templates": [{"metadata": {}}, {"metadata": {"namespace": "x"}}]}, OMIT, False),
    ],
}


def _normalise(rule: str) -> str:
    return " ".join(rule.split())


def _all_rules(
    crds: dict[str, CRDSchema], main_crds: dict[str, CRDSchema]
) -> list[tuple[CRDSchema, str, dict[str, Any]]]:
    found: list[tuple[CRDSchema, str, dict[str, Any]]] = []
    for schemas in (crds, main_crds):
        for schema in schemas.values():
            found.extend((schema, path, rule) for path, rule in schema.iter_rules())
    return found


def _raw_rule_count(path: Path) -> int:
    # Independent of CRDSchema.iter_rules: count `rule:` entries in the decoded YAML.
    def count(node: Any) -> int:
        if isinstance(node, dict):
            own = sum(1 for r in node.get("x-kubernetes-validations") or [] if "rule" in r)
            return own + sum(count(v) for k, v in node.items() if k != "x-kubernetes-validations")
        if isinstance(node, list):
            return sum(count(v) for v in node)
        return 0

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: 20x faster
    return count(yaml.load(path.read_bytes(), Loader=loader))


def test_every_rule_compiles(
    upstream: Path, crds: dict[str, CRDSchema], main_crds: dict[str, CRDSchema]
) -> None:
    files = {
        TRAINJOBS: "trainer.kubeflow.org_trainjobs.yaml",
        RUNTIMES: "trainer.kubeflow.org_trainingruntimes.yaml",
        CLUSTER_RUNTIMES: "trainer.kubeflow.org_clustertrainingruntimes.yaml",
    }
    for folder, schemas in (("crds", crds), ("main-8c0f505/crds", main_crds)):
        for name, schema in schemas.items():
            # compile_rules raises CELCompileError (failing the test) for any rule that
            # cel-python cannot parse or that calls a function we do not provide.
            compiled = schema.compile_rules()
            if name == JOBSETS:
                source = upstream / "jobset" / "jobset.x-k8s.io_jobsets.yaml"
            else:
                source = upstream / "kubeflow-trainer" / folder / files[name]
            assert compiled == _raw_rule_count(source) > 0, name


def test_every_rule_has_cases(crds: dict[str, CRDSchema], main_crds: dict[str, CRDSchema]) -> None:
    texts = {_normalise(rule["rule"]) for _, _, rule in _all_rules(crds, main_crds)}
    assert texts == {_normalise(t) for t in RULE_CASES}


def test_every_rule_evaluates(crds: dict[str, CRDSchema], main_crds: dict[str, CRDSchema]) -> None:
    cases = {_normalise(text): examples for text, examples in RULE_CASES.items()}
    checked = 0
    for schema, path, rule in _all_rules(crds, main_crds):
        node = schema.schema_at(path) if path else schema.schema
        for value, old, expected in cases[_normalise(rule["rule"])]:
            outcome = evaluate_rule(rule, value, old, schema=node, root=not path)
            assert outcome == (expected, None), (schema.name, path, rule["rule"], value)
            checked += 1
    assert checked > 200


def test_rule_evaluation_errors_are_reported() -> None:
    passed, error = evaluate_rule(_ROOT_NAME, {"metadata": {}}, root=True)
    assert (passed, error) == (False, "no such key: name")
    with pytest.raises(ValueError, match="oldSelf"):
        evaluate_rule("self == oldSelf", 1)


# --------------------------------------------------------------------------------------
# Defaulting, pruning, unknown fields
# --------------------------------------------------------------------------------------


def test_trainjob_defaults(trainjob: CRDSchema) -> None:
    job = new_trainjob()
    defaulted = trainjob.apply_defaults(job)
    assert job == new_trainjob(), "apply_defaults must not modify its argument"
    assert defaulted["spec"]["runtimeRef"] == {
        "name": "torch-distributed",
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
    }
    assert defaulted["spec"]["managedBy"] == "trainer.kubeflow.org/trainjob-controller"
    assert defaulted["spec"]["suspend"] is False
    # no default invents a missing parent (spec.runtimePatches, status ...)
    assert "runtimePatches" not in defaulted["spec"]
    assert "status" not in defaulted
    assert trainjob.apply_defaults(defaulted) == defaulted
    # explicit values win; a null non-nullable field takes the default
    job["spec"]["suspend"] = True
    job["spec"]["managedBy"] = None
    again = trainjob.apply_defaults(job)
    assert again["spec"]["suspend"] is True
    assert again["spec"]["managedBy"] == "trainer.kubeflow.org/trainjob-controller"


def test_defaults_inside_list_items(trainjob: CRDSchema) -> None:
    job = new_trainjob()
    job["spec"]["trainer"]["env"] = [
        {"name": "FROM_CM", "valueFrom": {"configMapKeyRef": {"key": "k"}}},
        {
            "name": "FROM_FILE",
            "valueFrom": {"fileKeyRef": {"key": "k", "path": "p", "volumeName": "v"}},
        },
    ]
    env = trainjob.apply_defaults(job)["spec"]["trainer"]["env"]
    assert env[0]["valueFrom"]["configMapKeyRef"] == {"key": "k", "name": ""}
    assert env[1]["valueFrom"]["fileKeyRef"]["optional"] is False


def test_unknown_fields_and_prune(trainjob: CRDSchema) -> None:
    job = trainjob.apply_defaults(new_trainjob())
    assert trainjob.unknown_fields(job) == []
    noisy = copy.deepcopy(job)
    noisy["spec"]["foo"] = 1
    noisy["spec"]["trainer"]["env"][1]["bar"] = True
    noisy["metadata"]["colour"] = "blue"
    noisy["status"] = {"bogus": 1}
    noisy["extra"] = {}
    assert trainjob.unknown_fields(noisy) == [
        "metadata.colour",
        "spec.trainer.env[1].bar",
        "spec.foo",
        "status.bogus",
        "extra",
    ]
    pruned = trainjob.prune(noisy)
    assert pruned == job | {"status": {}}
    assert trainjob.unknown_fields(pruned) == []
    assert "foo" in noisy["spec"], "prune must not modify its argument"
    # As kube-apiserver 1.36 words it: ObjectMeta's first, then the rest, each sorted.
    assert format_unknown_fields(["spec.foo", "metadata.zz", "extra", "metadata.aa"], TJ) == (
        'TrainJob in version "v1alpha1" cannot be handled as a TrainJob: strict decoding '
        'error: unknown field "metadata.aa", unknown field "metadata.zz", unknown field '
        '"extra", unknown field "spec.foo"'
    )


def test_prune_drops_non_nullable_nulls(trainjob: CRDSchema) -> None:
    job = new_trainjob()
    job["spec"]["trainer"]["numNodes"] = None
    assert "numNodes" not in trainjob.prune(job)["spec"]["trainer"]
    assert trainjob.prune(job, drop_nulls=False)["spec"]["trainer"]["numNodes"] is None


# --------------------------------------------------------------------------------------
# Validation against the real CRDs
# --------------------------------------------------------------------------------------


def _runtime_documents(upstream: Path) -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in sorted((upstream / "kubeflow-trainer" / "runtimes").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "ClusterTrainingRuntime":
                docs.append((str(path.relative_to(upstream)), doc))
    return docs


def test_default_runtimes_are_valid(
    upstream: Path, crds: dict[str, CRDSchema], main_crds: dict[str, CRDSchema]
) -> None:
    documents = _runtime_documents(upstream)
    assert len(documents) >= 9
    for schemas in (crds, main_crds):
        schema = schemas[CLUSTER_RUNTIMES]
        for source, doc in documents:
            assert schema.unknown_fields(doc) == [], source
            assert messages(schema.validate(schema.apply_defaults(doc))) == [], source
            # the same spec is a valid namespaced TrainingRuntime too
            namespaced = copy.deepcopy(doc) | {"kind": "TrainingRuntime"}
            namespaced["metadata"]["namespace"] = "default"
            runtime = schemas[RUNTIMES]
            assert messages(runtime.validate(runtime.apply_defaults(namespaced))) == [], source


def test_runtime_with_two_policies_is_rejected(upstream: Path, crds: dict[str, CRDSchema]) -> None:
    schema = crds[CLUSTER_RUNTIMES]
    _, doc = next(
        d for d in _runtime_documents(upstream) if d[1]["metadata"]["name"] == "torch-distributed"
    )
    doc = copy.deepcopy(doc)
    doc["spec"]["mlPolicy"]["flux"] = {"numProcPerNode": 0}
    assert messages(schema.validate(schema.apply_defaults(doc))) == [
        "spec.mlPolicy: Invalid value: Only one of the policy can be configured",
        "spec.mlPolicy.flux.numProcPerNode: Invalid value: 0: "
        "NumProcPerNode in fluxPolicy must be >= 1",
    ]


def test_valid_trainjob(trainjob: CRDSchema) -> None:
    job = trainjob.apply_defaults(new_trainjob())
    assert trainjob.validate(job) == []
    trainjob.check(job)  # does not raise
    # an update that changes only mutable fields
    suspended = copy.deepcopy(job)
    suspended["spec"]["suspend"] = True
    suspended["metadata"]["labels"]["new"] = "label"
    assert trainjob.validate(suspended, job) == []


def _with(path: str, value: Any) -> Any:
    """A mutation setting a dotted path (creating objects on the way)."""

    def mutate(job: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target = job
        for name in parents:
            target = target.setdefault(name, {})
        target[last] = value

    return mutate


INVALID_TRAINJOBS: list[tuple[str, Any, list[str]]] = [
    (
        "name not a DNS subdomain",
        _with("metadata.name", "My_Job"),
        [
            'metadata.name: Invalid value: "My_Job": a lowercase RFC 1123 subdomain must '
            "consist of lower case alphanumeric characters, '-' or '.', and must start and end "
            "with an alphanumeric character (e.g. 'example.com', regex used for validation is "
            "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            "<nil>: Invalid value: metadata.name must match RFC 1035 DNS label format",
        ],
    ),
    (
        "name is a subdomain but not an RFC 1035 label",
        _with("metadata.name", "1st.job"),
        ["<nil>: Invalid value: metadata.name must match RFC 1035 DNS label format"],
    ),
    (
        "name longer than 63",
        _with("metadata.name", "j" * 64),
        ["<nil>: Invalid value: metadata.name must be no more than 63 characters"],
    ),
    (
        "numNodes as a string",
        _with("spec.trainer.numNodes", "2"),
        [
            'spec.trainer.numNodes: Invalid value: "string": spec.trainer.numNodes in body '
            'must be of type integer: "string"',
            NOT_CHECKED,
        ],
    ),
    (
        "activeDeadlineSeconds 0",
        _with("spec.activeDeadlineSeconds", 0),
        [
            "spec.activeDeadlineSeconds: Invalid value: 0: spec.activeDeadlineSeconds in body "
            "should be greater than or equal to 1"
        ],
    ),
    (
        "17 runtimePatches",
        _with("spec.runtimePatches", [{"manager": f"example.com/m{i}"} for i in range(17)]),
        ["spec.runtimePatches: Too many: 17: must have at most 16 items"],
    ),
    (
        "duplicate runtimePatches manager",
        _with("spec.runtimePatches", [{"manager": "kueue"}, {"manager": "kueue"}]),
        ['spec.runtimePatches[1]: Duplicate value: {"manager":"kueue"}'],
    ),
    (
        "duplicate env names",
        _with("spec.trainer.env", [{"name": "A"}, {"name": "B", "value": "1"}, {"name": "A"}]),
        ['spec.trainer.env[2]: Duplicate value: {"name":"A"}'],
    ),
    (
        "bad managedBy",
        _with("spec.managedBy", "example.com/controller"),
        [
            'spec.managedBy: Invalid value: "example.com/controller": ManagedBy must be '
            "trainer.kubeflow.org/trainjob-controller or kueue.x-k8s.io/multikueue if set"
        ],
    ),
    (
        "storageUri without scheme",
        _with("spec.initializer", {"model": {"storageUri": "models/llama"}}),
        [
            'spec.initializer.model.storageUri: Invalid value: "models/llama": storageUri may be '
            "empty, or it must be a valid URI (scheme://...)"
        ],
    ),
    (
        "runtimeRef without name",
        _with("spec.runtimeRef", {"kind": "TrainingRuntime"}),
        # A missing required field blocks the CEL rules (kube-apiserver 1.36).
        ["spec.runtimeRef.name: Required value", NOT_CHECKED],
    ),
    (
        "bad label value",
        _with("metadata.labels", {"team": "ml team"}),
        [
            'metadata.labels: Invalid value: "ml team": a valid label must be an empty string '
            "or consist of alphanumeric characters, '-', '_' or '.', and must start and end "
            "with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', "
            "regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
        ],
    ),
    (
        "resource quantity pattern",
        _with("spec.trainer.resourcesPerNode", {"limits": {"memory": "1 GiB"}}),
        [
            'spec.trainer.resourcesPerNode.limits.memory: Invalid value: "1 GiB": '
            "spec.trainer.resourcesPerNode.limits.memory in body should match "
            "'^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
            "([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$'"
        ],
    ),
    (
        "image too long",
        _with("spec.trainer.image", "x" * 501),
        ["spec.trainer.image: Too long: may not be more than 500 bytes"],
    ),
]


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [pytest.param(m, e, id=i) for i, m, e in INVALID_TRAINJOBS],
)
def test_invalid_trainjobs(trainjob: CRDSchema, mutate: Any, expected: list[str]) -> None:
    job = new_trainjob()
    mutate(job)
    assert messages(trainjob.validate(trainjob.apply_defaults(job))) == expected


def test_unknown_field_is_reported_not_rejected(trainjob: CRDSchema) -> None:
    job = trainjob.apply_defaults(new_trainjob())
    job["spec"]["trainer"]["numGPUs"] = 8
    assert trainjob.unknown_fields(job) == ["spec.trainer.numGPUs"]
    assert trainjob.validate(job) == []  # the apiserver prunes it instead


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("trainer", {"numNodes": 4}, "spec.trainer: Invalid value: field is immutable"),
        (
            "initializer",
            {"dataset": {"storageUri": "s3://other"}},
            "spec.initializer: Invalid value: field is immutable",
        ),
        (
            "runtimeRef",
            {"name": "deepspeed-distributed"},
            "spec.runtimeRef: Invalid value: field is immutable",
        ),
        (
            "managedBy",
            "kueue.x-k8s.io/multikueue",
            'spec.managedBy: Invalid value: "kueue.x-k8s.io/multikueue": field is immutable',
        ),
    ],
)
def test_immutable_fields(trainjob: CRDSchema, field: str, value: Any, expected: str) -> None:
    old = trainjob.apply_defaults(new_trainjob())
    new = copy.deepcopy(old)
    new["spec"][field] = value
    new = trainjob.apply_defaults(new)
    assert messages(trainjob.validate(new, old)) == [expected]
    assert trainjob.validate(new) == []  # only updates compare with oldSelf


def test_immutability_ignores_set_and_map_list_order(trainjob: CRDSchema) -> None:
    old = trainjob.apply_defaults(new_trainjob())
    new = copy.deepcopy(old)
    new["spec"]["trainer"]["env"].reverse()  # env is a list-type map: order is not content
    assert trainjob.validate(new, old) == []
    new["spec"]["trainer"]["command"].reverse()  # command is atomic: order matters
    assert messages(trainjob.validate(new, old)) == [
        "spec.trainer: Invalid value: field is immutable"
    ]


def test_adding_runtime_patch_on_update(trainjob: CRDSchema) -> None:
    old = trainjob.apply_defaults(new_trainjob())
    new = copy.deepcopy(old)
    new["spec"]["runtimePatches"] = [{"manager": "kueue.x-k8s.io/multikueue"}]
    assert trainjob.validate(new, old) == []


def test_ratcheting_keeps_unchanged_invalid_values(trainjob: CRDSchema) -> None:
    old = trainjob.apply_defaults(new_trainjob())
    old["spec"]["trainer"]["resourcesPerNode"]["limits"]["cpu"] = "four"
    assert len(trainjob.validate(old)) == 1
    new = copy.deepcopy(old)
    new["spec"]["suspend"] = True
    assert trainjob.validate(new, old) == []
    assert len(trainjob.validate(new, old, ratcheting=False)) == 1


def test_status_subresource(trainjob: CRDSchema) -> None:
    job = trainjob.apply_defaults(new_trainjob())
    updated = copy.deepcopy(job)
    updated["status"] = {"trainerStatus": {"progressPercentage": 101}}
    assert messages(trainjob.validate(updated, job, subresource="status")) == [
        "status.trainerStatus.progressPercentage: Invalid value: 101: "
        "status.trainerStatus.progressPercentage in body should be less than or equal to 100",
        "status.trainerStatus: Invalid value: "
        "lastUpdatedTime is required when trainerStatus is present",
    ]
    # main-resource writes ignore status entirely
    assert trainjob.validate(updated, job) == []
    updated["status"]["trainerStatus"] = {
        "progressPercentage": 40,
        "lastUpdatedTime": "2026-03-04T05:06:07Z",
    }
    assert trainjob.validate(updated, job, subresource="status") == []
    updated["status"]["trainerStatus"]["lastUpdatedTime"] = "yesterday"
    assert messages(trainjob.validate(updated, job, subresource="status")) == [
        'status.trainerStatus.lastUpdatedTime: Invalid value: "yesterday": '
        'status.trainerStatus.lastUpdatedTime in body must be of type date-time: "yesterday"',
        NOT_CHECKED,
    ]
    with pytest.raises(ValueError, match="subresource"):
        trainjob.validate(updated, subresource="scale")


def test_main_branch_num_proc_per_node(
    crds: dict[str, CRDSchema], main_crds: dict[str, CRDSchema]
) -> None:
    main = main_crds[TRAINJOBS]
    job = new_trainjob()
    job["spec"]["trainer"]["numProcPerNode"] = 0
    assert messages(main.validate(main.apply_defaults(job))) == [
        "spec.trainer.numProcPerNode: Invalid value: 0: "
        "numProcPerNode must be greater than or equal to 1"
    ]
    # v2.3.0 has no such rule
    assert crds[TRAINJOBS].validate(crds[TRAINJOBS].apply_defaults(job)) == []
    job["spec"]["trainer"]["numProcPerNode"] = 4
    assert main.validate(main.apply_defaults(job)) == []


def test_check_raises_the_apiserver_message(trainjob: CRDSchema) -> None:
    job = trainjob.apply_defaults(new_trainjob("Bad_Name"))
    with pytest.raises(
        ValueError, match=r'^TrainJob\.trainer\.kubeflow\.org "Bad_Name" is invalid: \['
    ):
        trainjob.check(job)


def test_jobset_crd(crds: dict[str, CRDSchema]) -> None:
    jobset = crds[JOBSETS]
    spec = {
        "startupPolicy": {"startupPolicyOrder": "InOrder"},
        "replicatedJobs": [
            {"name": "init", "template": {"spec": {"template": {"spec": {"containers": []}}}}},
            {
                "name": "node",
                "dependsOn": [{"name": "init", "status": "Complete"}],
                "template": {"spec": {"template": {"spec": {"containers": []}}}},
            },
        ],
    }
    obj = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js"},
        "spec": spec,
    }
    assert messages(jobset.validate(jobset.apply_defaults(obj))) == [
        "spec: Invalid value: StartupPolicy and DependsOn APIs are mutually exclusive"
    ]


# --------------------------------------------------------------------------------------
# Error formatting
# --------------------------------------------------------------------------------------


def test_field_error_formatting() -> None:
    assert str(FieldError("spec.x", "Required value", "")) == "spec.x: Required value"
    assert str(FieldError("", "Invalid value", "boom", None)) == "<nil>: Invalid value: null: boom"
    assert str(FieldError("spec.n", "Invalid value", "d", 1e6)) == "spec.n: Invalid value: 1e+06: d"
    assert str(FieldError("spec.n", "Invalid value", "d", 0.25)) == "spec.n: Invalid value: 0.25: d"
    assert str(FieldError("spec.n", "Invalid value", "d", 100.0)) == "spec.n: Invalid value: 100: d"
    assert str(FieldError("s", "Invalid value", "", 1.5e-5)) == "s: Invalid value: 1.5e-05"
    assert str(FieldError("s", "Invalid value", "d", True)) == "s: Invalid value: true: d"
    assert str(FieldError("s", "Invalid value", "d", 'a"\n')) == 's: Invalid value: "a\\"\\n": d'
    assert str(FieldError("s", "Forbidden", "no", "ignored")) == "s: Forbidden: no"
    assert str(FieldError("s", "Invalid value", "d", OMIT)) == "s: Invalid value: d"
    # Not a scalar: as Go's json.Marshal writes it (floats plain from 1e-6 to 1e21,
    # "e-7" not "e-07"; <, > and & escaped; keys sorted).
    odd = {"z": [1e21, 1.5e-7, 1e20, 0.5, 100.0], "a": "<&>\u2028"}
    assert str(FieldError("s", "Duplicate value", "", odd)) == (
        's: Duplicate value: {"a":"\\u003c\\u0026\\u003e\\u2028",'
        '"z":[1e+21,1.5e-7,100000000000000000000,0.5,100]}'
    )
    assert str(FieldError("s", "Duplicate value", "", [1, "a"])) == ('s: Duplicate value: [1,"a"]')
    typed = FieldError("s", "Invalid value", "d", "string", reason="FieldValueTypeInvalid")
    assert typed.blocking
    assert typed.cause() == {
        "reason": "FieldValueTypeInvalid",
        "message": 'Invalid value: "string": d',
        "field": "s",
    }
    assert FieldError("s", "Too many", "m", 3).cause_reason == "FieldValueTooMany"


def test_format_invalid_and_status() -> None:
    one = FieldError("spec.a", "Required value", "")
    two = FieldError("spec.b", "Invalid value", "bad", 3)
    assert format_invalid("TrainJob", "trainer.kubeflow.org", "j", [one]) == (
        'TrainJob.trainer.kubeflow.org "j" is invalid: spec.a: Required value'
    )
    assert format_invalid("TrainJob", "trainer.kubeflow.org", "j", [one, two, one]) == (
        'TrainJob.trainer.kubeflow.org "j" is invalid: '
        "[spec.a: Required value, spec.b: Invalid value: 3: bad]"
    )
    assert format_invalid("Pod", "", "p", []) == 'Pod "p" is invalid'
    status = invalid_status("TrainJob", "trainer.kubeflow.org", "j", [one, two])
    assert status["code"] == 422
    assert status["reason"] == "Invalid"
    assert status["details"]["causes"] == [
        {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.a"},
        {"reason": "FieldValueInvalid", "message": "Invalid value: 3: bad", "field": "spec.b"},
    ]


# --------------------------------------------------------------------------------------
# A synthetic CRD: the generic schema features, independent of the upstream data
# --------------------------------------------------------------------------------------

WIDGET_SPEC: dict[str, Any] = {
    "type": "object",
    "required": ["size"],
    "x-kubernetes-validations": [
        {
            "rule": "self.minReplicas <= self.maxReplicas",
            "messageExpression": "'min ' + string(self.minReplicas) + ' > max ' "
            "+ string(self.maxReplicas)",
            "fieldPath": ".minReplicas",
        },
        {
            "rule": "!has(self.secret) || self.mode == 'secure'",
            "message": "secret needs secure mode",
            "reason": "FieldValueForbidden",
            "fieldPath": ".secret",
        },
    ],
    "properties": {
        "size": {
            "x-kubernetes-int-or-string": True,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
        },
        "mode": {"type": "string", "enum": ["fast", "secure"], "default": "fast"},
        "minReplicas": {"type": "integer", "default": 1},
        "maxReplicas": {"type": "integer", "default": 3},
        "ratio": {
            "type": "number",
            "minimum": 0,
            "exclusiveMinimum": True,
            "maximum": 1,
            "x-kubernetes-validations": [{"rule": "self != 0.5", "message": "not a half"}],
        },
        "note": {"type": "string", "nullable": True, "maxLength": 5},
        "secret": {"type": "string"},
        "tags": {
            "type": "array",
            "items": {"type": "string"},
            "maxItems": 3,
            "x-kubernetes-list-type": "set",
            "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "immutable"}],
        },
        "labels": {
            "type": "object",
            "maxProperties": 2,
            "additionalProperties": {"type": "string", "minLength": 1},
        },
        "blob": {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": True,
            "properties": {"known": {"type": "integer", "default": 7}},
        },
        "ports": {
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["port", "protocol"],
            "items": {
                "type": "object",
                "required": ["port"],
                "properties": {
                    "port": {"type": "integer"},
                    "protocol": {"type": "string", "default": "TCP"},
                },
            },
        },
        "names": {
            "type": "array",
            "items": {"type": "string"},
            "x-kubernetes-validations": [
                {
                    "rule": "self.all(n, n.lowerAscii() == n && n.split('-').size() <= 3)",
                    "message": "lower-case, at most 2 dashes",
                }
            ],
        },
        "when": {"type": "string", "format": "date-time"},
        "mapping": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "properties": {"v": {"type": "integer"}},
                "x-kubernetes-validations": [{"rule": "self.v >= 0"}],
            },
        },
    },
}

WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {
            "plural": "widgets",
            "singular": "widget",
            "kind": "Widget",
            "listKind": "WidgetList",
            "shortNames": ["wd"],
        },
        "versions": [
            {
                "name": "v1beta1",
                "served": True,
                "storage": False,
                "schema": {"openAPIV3Schema": {"type": "object"}},
            },
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "apiVersion": {"type": "string"},
                            "kind": {"type": "string"},
                            "metadata": {"type": "object"},
                            "spec": WIDGET_SPEC,
                            "status": {
                                "type": "object",
                                "properties": {
                                    "phase": {"type": "string"},
                                    "count": {"type": "integer", "minimum": 0},
                                },
                                "x-kubernetes-validations": [
                                    {
                                        "rule": "!has(oldSelf.phase) || has(self.phase)",
                                        "message": "phase cannot be removed",
                                    }
                                ],
                            },
                        },
                    }
                },
            },
        ],
    },
}


@pytest.fixture(scope="module")
def widgets() -> CRDSchema:
    return CRDSchema.from_dict(WIDGET_CRD)


def widget(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": "default"},
        "spec": {"size": 3} | spec,
    }


def test_from_dict_versions(widgets: CRDSchema, tmp_path: Path) -> None:
    assert widgets.version == "v1"
    assert widgets.storage_version == "v1"
    assert widgets.served_versions == ("v1beta1", "v1")
    assert widgets.short_names == ("wd",)
    assert widgets.name == "widgets.example.com"
    assert CRDSchema.from_dict(WIDGET_CRD, "v1beta1").version == "v1beta1"
    with pytest.raises(ValueError, match="no version"):
        CRDSchema.from_dict(WIDGET_CRD, "v2")
    file = tmp_path / "crd.yaml"
    file.write_text("---\n# comment only\n---\n" + yaml.safe_dump(WIDGET_CRD))
    assert CRDSchema.from_file(file).kind == "Widget"


def test_widget_defaults(widgets: CRDSchema) -> None:
    obj = widget(ports=[{"port": 80}], blob={"anything": [1]})
    spec = widgets.apply_defaults(obj)["spec"]
    assert spec["mode"] == "fast"
    assert (spec["minReplicas"], spec["maxReplicas"]) == (1, 3)
    assert spec["ports"] == [{"port": 80, "protocol": "TCP"}]
    assert spec["blob"] == {"anything": [1], "known": 7}
    assert "blob" not in widgets.apply_defaults(widget())["spec"]


def test_widget_unknown_fields(widgets: CRDSchema) -> None:
    obj = widget(blob={"free": {"form": 1}}, labels={"any": "key"}, bogus=1)
    assert widgets.unknown_fields(obj) == ["spec.bogus"]


WIDGET_CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    ("valid", {"size": "10Gi", "ratio": 1, "note": None, "tags": ["b", "a"]}, []),
    (
        "int-or-string",
        {"size": True},
        [
            'spec.size: Invalid value: "boolean": spec.size in body must be of type '
            'integer,string: "boolean"',
            NOT_CHECKED,
        ],
    ),
    (
        "enum",
        {"mode": "slow"},
        ['spec.mode: Unsupported value: "slow": supported values: "fast", "secure"', NOT_CHECKED],
    ),
    (
        # Dropped by the defaulter (neither nullable nor defaulted): then missing.
        "null for a non-nullable field",
        {"size": None},
        ["spec.size: Required value", NOT_CHECKED],
    ),
    (
        "exclusive minimum",
        {"ratio": 0},
        ["spec.ratio: Invalid value: 0: spec.ratio in body should be greater than 0"],
    ),
    (
        "maximum",
        {"ratio": 1.5},
        ["spec.ratio: Invalid value: 1.5: spec.ratio in body should be less than or equal to 1"],
    ),
    (
        "heterogeneous numeric equality",
        {"ratio": 0.5},
        ["spec.ratio: Invalid value: 0.5: not a half"],
    ),
    ("maxLength", {"note": "toolong"}, ["spec.note: Too long: may not be more than 5 bytes"]),
    ("set duplicate", {"tags": ["a", "b", "a"]}, ['spec.tags[2]: Duplicate value: "a"']),
    (
        "maxItems",
        {"tags": ["a", "b", "c", "d"]},
        ["spec.tags: Too many: 4: must have at most 3 items"],
    ),
    (
        "additionalProperties value",
        {"labels": {"a": ""}},
        ['spec.labels.a: Invalid value: "": spec.labels.a in body should be at least 1 chars long'],
    ),
    (
        "maxProperties",
        {"labels": {"a": "1", "b": "2", "c": "3"}},
        ["spec.labels: Too many: 3: must have at most 2 items"],
    ),
    (
        "composite map keys",
        {"ports": [{"port": 80}, {"port": 80, "protocol": "UDP"}, {"port": 80, "protocol": "TCP"}]},
        ['spec.ports[2]: Duplicate value: {"port":80,"protocol":"TCP"}'],
    ),
    (
        "messageExpression and fieldPath",
        {"minReplicas": 5, "maxReplicas": 2},
        ["spec.minReplicas: Invalid value: min 5 > max 2"],
    ),
    ("reason Forbidden", {"secret": "s"}, ["spec.secret: Forbidden: secret needs secure mode"]),
    ("secure secret", {"secret": "s", "mode": "secure"}, []),
    (
        "string extension functions",
        {"names": ["ok", "a-b-c", "Upper"]},
        ["spec.names: Invalid value: lower-case, at most 2 dashes"],
    ),
    (
        "too many dashes",
        {"names": ["a-b-c-d"]},
        ["spec.names: Invalid value: lower-case, at most 2 dashes"],
    ),
    (
        "date-time format",
        {"when": "2026-02-30T00:00:00Z"},
        [
            'spec.when: Invalid value: "2026-02-30T00:00:00Z": spec.when in body must be of type '
            'date-time: "2026-02-30T00:00:00Z"',
            NOT_CHECKED,
        ],
    ),
    ("date-time ok", {"when": "2026-02-28T10:00:00.5+02:00"}, []),
    (
        "rule on map entries",
        {"mapping": {"k": {"v": -1}}},
        ["spec.mapping[k]: Invalid value: failed rule: self.v >= 0"],
    ),
    (
        "evaluation error",
        {"mapping": {"k": {}}},
        ['spec.mapping[k]: Invalid value: "object": no such key: v evaluating rule: self.v >= 0'],
    ),
]


@pytest.mark.parametrize(
    ("spec", "expected"), [pytest.param(s, e, id=i) for i, s, e in WIDGET_CASES]
)
def test_widget_validation(widgets: CRDSchema, spec: dict[str, Any], expected: list[str]) -> None:
    obj = widgets.apply_defaults(widget(**spec))
    assert messages(widgets.validate(obj)) == expected


def test_widget_missing_required_and_name(widgets: CRDSchema) -> None:
    obj = widgets.apply_defaults(widget())
    del obj["spec"]["size"]
    del obj["metadata"]["name"]
    assert messages(widgets.validate(obj)) == [
        "metadata.name: Required value: name or generateName is required",
        "spec.size: Required value",
        NOT_CHECKED,
    ]


def test_widget_transitions(widgets: CRDSchema) -> None:
    old = widgets.apply_defaults(widget(tags=["a", "b"]))
    reordered = copy.deepcopy(old)
    reordered["spec"]["tags"] = ["b", "a"]
    assert widgets.validate(reordered, old) == []  # a set: order is not content
    changed = copy.deepcopy(old)
    changed["spec"]["tags"] = ["a", "c"]
    assert messages(widgets.validate(changed, old)) == ["spec.tags: Invalid value: immutable"]

    old["status"] = {"phase": "Running"}
    new = copy.deepcopy(old)
    new["status"] = {"count": 1}
    assert messages(widgets.validate(new, old, subresource="status")) == [
        "status: Invalid value: phase cannot be removed"
    ]
    new["status"]["phase"] = "Done"
    assert widgets.validate(new, old, subresource="status") == []
    # without an old status the transition rule does not run
    assert widgets.validate(new, subresource="status") == []


def test_widget_ratcheting_of_cel_rules(widgets: CRDSchema) -> None:
    old = widgets.apply_defaults(widget(minReplicas=5, maxReplicas=2))
    assert len(widgets.validate(old)) == 1
    touched = copy.deepcopy(old)
    touched["spec"]["note"] = "hi"  # spec changed: its rules run again
    assert len(widgets.validate(touched, old)) == 1
    relabelled = copy.deepcopy(old)
    relabelled["metadata"]["labels"] = {"x": "y"}  # spec untouched: ratcheted
    assert widgets.validate(relabelled, old) == []


def _crd_with_rule(rule: str) -> dict[str, Any]:
    crd = copy.deepcopy(WIDGET_CRD)
    spec = crd["spec"]["versions"][1]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["x-kubernetes-validations"] = [{"rule": rule}]
    return crd


@pytest.mark.parametrize(
    ("rule", "problem"),
    [
        ("url(self.secret).getHost() == 'x'", "url"),
        ("quantity(self.size).isLessThan(quantity('1Gi'))", "isLessThan, quantity"),
        ("self.size ==", "cannot compile"),
    ],
)
def test_unsupported_rules_fail_loudly(rule: str, problem: str) -> None:
    schema = CRDSchema.from_dict(_crd_with_rule(rule))
    with pytest.raises(CELCompileError, match=problem):
        schema.compile_rules()
    with pytest.raises(CELCompileError):
        schema.validate(widget())


@pytest.mark.parametrize(
    ("rule", "value", "expected"),
    [
        ("self.indexOf('b') == 1 && self.lastIndexOf('a') == 2", "aba", True),
        ("self.substring(1, 3) == 'bc' && self.charAt(0) == 'a'", "abcd", True),
        ("self.upperAscii() == 'ÄB' && self.trim() == self", "äb", False),
        ("self.replace('-', '_') == 'a_b_c' && self.split('-', 2) == ['a', 'b-c']", "a-b-c", True),
        ("['x', 'y'].join('/') == self && self.find('[a-z]+') == 'x'", "x/y", True),
        ("self.findAll('[0-9]') == ['1', '2']", "a1b2", True),
        ("[1, 2, 3].isSorted() && [3, 1].sum() == 4 && [2, 5].max() == 5", "", True),
        ("[3, 1, 2].isSorted()", "", False),
        ("self == 1", 1.0, True),
        ("self != 'x'", 1, True),
        ("1.0 in [self]", 1, True),
        ("type(self) == string", "s", True),
        ("self > timestamp('2020-01-01T00:00:00Z')", "2026-01-01T00:00:00Z", True),
    ],
)
def test_kubernetes_cel_library(rule: str, value: Any, expected: bool) -> None:
    schema = {"type": "string", "format": "date-time"} if "timestamp" in rule else None
    assert evaluate_rule(rule, value, schema=schema) == (expected, None)


# --------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------

_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=4), st.floats(-2, 2)
)
_json = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)
_spec_keys = st.sampled_from(
    [
        "size",
        "mode",
        "minReplicas",
        "ratio",
        "note",
        "tags",
        "labels",
        "blob",
        "ports",
        "names",
        "when",
        "mapping",
        "secret",
        "bogus",
    ]
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(spec=st.dictionaries(_spec_keys, _json, max_size=5))
def test_arbitrary_input_never_crashes(widgets: CRDSchema, spec: dict[str, Any]) -> None:
    obj = widget(**spec)
    defaulted = widgets.apply_defaults(obj)
    assert widgets.apply_defaults(defaulted) == defaulted
    pruned = widgets.prune(defaulted)
    assert widgets.unknown_fields(pruned) == []
    assert widgets.prune(pruned) == pruned
    for error in widgets.validate(pruned) + widgets.validate(pruned, defaulted):
        assert isinstance(error, FieldError)
        assert str(error)
