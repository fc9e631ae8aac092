"""The core's layer contract (``docs/architecture.md``), enforced: no import runs upward,
whether at module level, inside a function or under ``TYPE_CHECKING``, and no two units
import each other."""

from __future__ import annotations

import ast
import shutil
import sys
from pathlib import Path

import pytest

from layering import (
    ADAPTERS,
    CORE,
    LAYERS,
    SRC,
    adapter_imports,
    all_imports,
    cycles,
    imports_of,
    layer_graph,
    layer_unit,
    module_graph,
    private_imports,
    read_tree,
    unit_graph,
    upward_imports,
)


def test_every_unit_has_a_layer() -> None:
    units = {layer_unit(module) for module in read_tree()} - {"__init__"}
    assert units <= set(LAYERS), f"units without a layer: {sorted(units - set(LAYERS))}"


def test_no_import_runs_upward() -> None:
    problems = upward_imports(all_imports())
    assert not problems, "imports against the layer order:\n" + "\n".join(problems)


def test_no_cycle_between_units() -> None:
    imports = all_imports()
    assert cycles(layer_graph(imports)) == []
    assert cycles(unit_graph(imports)) == []


def test_no_cycle_between_modules() -> None:
    # Inside a unit too: a cycle there (even one closed by a lazy or TYPE_CHECKING
    # import) means two modules that cannot be read, tested or moved apart.
    found = cycles(module_graph(all_imports()))
    assert found == [], f"module import cycles: {found}"


def test_a_planted_module_cycle_inside_a_unit_fails(tmp_path: Path) -> None:
    copy = tmp_path / "kf_trainer_core"
    shutil.copytree(CORE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / "cluster" / "status.py"
    planted = "\nif TYPE_CHECKING:\n    from kf_trainer_core.cluster.outputs import JobOutputs\n"
    target.write_text(target.read_text() + planted)
    found = cycles(module_graph(all_imports(copy)))
    pair = {"kf_trainer_core.cluster.outputs", "kf_trainer_core.cluster.status"}
    assert any(pair <= set(component) for component in found), found


def test_job_side_modules_import_the_standard_library_only() -> None:
    # report.py and checkpoints.py run inside the job's pods, where only they are copied.
    tree = read_tree()
    for name in ("report", "checkpoints"):
        path, _ = tree[f"kf_trainer_core.{name}"]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                tops = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                tops = [node.module.split(".")[0]]
            else:
                continue
            for top in tops:
                assert top in sys.stdlib_module_names or top == "__future__", (name, top)


# ---------------------------------------------------------------- the checker can fail

_MODULES = (
    "kf_trainer_core.base.errors",
    "kf_trainer_core.errors",
    "kf_trainer_core.cluster.status",
    "kf_trainer_core.k8s",
)


def _planted(source: str, module: str = "kf_trainer_core.base.errors") -> list[str]:
    return upward_imports(imports_of(source, module, False, _MODULES))


def test_a_planted_upward_import_fails_at_module_level() -> None:
    problems = _planted("from kf_trainer_core.cluster.status import TrainJob\n")
    assert len(problems) == 1
    assert "base is below cluster" in problems[0]


def test_a_planted_lazy_upward_import_fails() -> None:
    source = "def f():\n    from kf_trainer_core.cluster import status\n    return status\n"
    problems = _planted(source)
    assert len(problems) == 1
    assert "lazy imports kf_trainer_core.cluster.status" in problems[0]


def test_a_planted_type_checking_upward_import_fails() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    import kf_trainer_core.cluster.status\n"
    )
    problems = _planted(source)
    assert len(problems) == 1
    assert "TYPE_CHECKING imports" in problems[0]


def test_a_planted_relative_upward_import_fails() -> None:
    # ``from ..cluster import status`` in kf_trainer_core.k8s.errors
    problems = upward_imports(
        imports_of("from ..cluster import status\n", "kf_trainer_core.k8s.errors", False, _MODULES)
    )
    assert len(problems) == 1
    assert "k8s is below cluster" in problems[0]


def test_a_lower_layer_importing_the_public_errors_module_fails() -> None:
    # The facade sits above cluster/: a lower layer imports base/errors.py instead.
    problems = _planted("from kf_trainer_core.errors import SpecError\n", "kf_trainer_core.k8s")
    assert len(problems) == 1
    assert "k8s is below errors" in problems[0]


def test_a_downward_import_passes() -> None:
    assert (
        _planted("from kf_trainer_core.k8s import calls\n", "kf_trainer_core.cluster.status") == []
    )


def test_a_planted_upward_import_in_a_copy_of_the_tree_fails(tmp_path: Path) -> None:
    copy = tmp_path / "kf_trainer_core"
    shutil.copytree(CORE, copy)
    assert upward_imports(all_imports(copy)) == []
    errors = copy / "base" / "errors.py"
    errors.write_text(
        errors.read_text() + "\n\ndef _later():\n    from kf_trainer_core.client import base\n"
    )
    problems = upward_imports(all_imports(copy))
    assert len(problems) == 1
    assert "base is below client" in problems[0]
    assert cycles(layer_graph(all_imports(copy)))  # base -> client -> ... -> base


# ------------------------------------------------------------ the public errors module


def test_the_public_errors_module_names_every_error_of_both_layers() -> None:
    # kf_trainer_core.errors is the one path users import errors from; an error added to
    # base/errors.py or cluster/errors.py must be reachable there too.
    import kf_trainer_core.errors as public
    from kf_trainer_core.base import errors as base_errors
    from kf_trainer_core.cluster import errors as cluster_errors

    for module in (base_errors, cluster_errors):
        defined = {
            name
            for name, value in vars(module).items()
            if not name.startswith("_") and getattr(value, "__module__", None) == module.__name__
        }
        missing = defined - set(public.__all__)
        assert not missing, f"{module.__name__} defines {sorted(missing)}, not in errors"
        for name in defined:
            assert getattr(public, name) is getattr(module, name)


def test_the_public_errors_module_is_cheap_to_import() -> None:
    # Airflow resolves retry rules by dotted path ("kf_trainer_core.errors.…") when a DAG
    # is parsed: the errors must not bring the status models (pydantic) with them.
    import subprocess

    code = "import sys, kf_trainer_core.errors; print(sorted(m for m in sys.modules if m.startswith(('pydantic', 'kubernetes'))))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "[]"


# ------------------------------------------------------- the adapters: public faces only


def test_adapters_import_only_the_cores_public_faces() -> None:
    # The client, the spec, the configuration, the errors, tasks/ (which names the rest
    # an adapter needs) and the pod-side report/checkpoints: a change inside the core
    # does not reach the adapters.
    problems = private_imports(adapter_imports())
    assert not problems, "adapters importing the core's insides:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    "source",
    [
        "from kf_trainer_core.cluster.status import TrainJob\n",
        "def f():\n    from kf_trainer_core.fields import retention\n    return retention\n",
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from kf_trainer_core.manifest.builder import identity_text\n",
        "from kf_trainer_core.spec.function import capture_source\n",
        "from kf_trainer_core.client.base import ClientBase\n",
        "from kf_trainer_core.base import quoting\n",
        "import kf_trainer_core.testing.server\n",
    ],
)
def test_a_planted_adapter_import_of_the_cores_insides_fails(source: str) -> None:
    found = imports_of(source, "kf_trainer_airflow.planted", False, read_tree())
    problems = private_imports(found)
    assert len(problems) == 1, problems
    assert "not a public face" in problems[0]


def test_adapter_imports_of_the_public_faces_pass() -> None:
    source = (
        "from kf_trainer_core.client import AsyncTrainerClient\n"
        "from kf_trainer_core.spec import Name\n"
        "from kf_trainer_core.config import LocalConfig\n"
        "from kf_trainer_core.errors import SpecError, failure_class_of\n"
        "from kf_trainer_core.tasks import JobOutputs, shown\n"
        "from kf_trainer_core.tasks.lifecycle import TaskJob\n"
        "def f():\n    from kf_trainer_core import report, checkpoints\n"
    )
    found = imports_of(source, "kf_trainer_prefect.planted", False, read_tree())
    assert len(found) == 10  # one a name
    assert private_imports(found) == []


def test_a_planted_adapter_import_in_a_copy_of_the_adapters_fails(tmp_path: Path) -> None:
    for adapter in ADAPTERS:
        shutil.copytree(SRC / adapter, tmp_path / adapter, ignore=shutil.ignore_patterns("*.pyc"))
    assert private_imports(adapter_imports(tmp_path)) == []
    task = tmp_path / "kf_trainer_kfp" / "task.py"
    task.write_text(
        task.read_text() + "\n\ndef _later():\n    from kf_trainer_core.k8s import calls\n"
    )
    problems = private_imports(adapter_imports(tmp_path))
    assert len(problems) == 1
    assert "kf_trainer_kfp.task:" in problems[0]
    assert "lazy imports kf_trainer_core.k8s" in problems[0]


def test_every_name_the_tasks_package_offers_resolves() -> None:
    # Its names are resolved on first use: a name that moved inside the core must fail
    # here, not in an adapter at run time.
    import kf_trainer_core.tasks as tasks

    for name in tasks.__all__:
        assert getattr(tasks, name) is not None, name
    assert set(tasks.__all__) <= set(dir(tasks))
