"""The wheel as users install it (issue 35, item 1; issue 26, item 1): built once with
``uv build``, installed from PyPI with its extras into fresh environments in a temporary
folder — no clone above, no ``shared/upstream``, no ``$KF_TRAINER_UPSTREAM`` — and run.

``pip install 'kf-trainer-suite[airflow,prefect,kfp,testing]'`` resolved to Airflow
3.2.2 with FastAPI 0.165, whose ``dag.test()`` fails on a plain ``@task``; only the dev
group's pins were known to work. Now:

- all four extras together run every Python example of docs/testing.md — the test
  server's, and the Airflow (``dag.test()``), Prefect (a flow) and KFP (a pipeline on
  ``kfp.local``) recipes against it, whose assertions are on the functions' own return
  values;
- each orchestrator's extra alone runs its own smoke on the local backend (a deferrable
  ``@task.kubeflow_trainer`` in ``dag.test()``, a ``trainjob_task`` flow, a
  ``trainjob_component`` pipeline) wherever it resolves to other versions than the
  all-extras environment has (``[prefect]`` alone gets a newer Prefect and FastAPI);
  where it resolves to the same deciding versions, the all-extras run proves it and the
  test says so;
- ``testing`` alone runs the page's test-server examples (what it says it needs);
- every combination a user would pick resolves, today, to the deciding versions (each
  orchestrator with the FastAPI, Starlette, pydantic or Kubernetes client it ran with)
  of an environment a smoke ran in;
- the installed package says its version and where its docs are.

The wheel is built once a session and each set of extras gets one environment (uv's
cache makes that quick after the first session); the smokes start side by side, since
most of their time is spent waiting on servers starting and jobs running."""

from __future__ import annotations

import itertools
import json
import re
import textwrap
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from examples_support import DOCS
from wheel_support import KEY_PACKAGES, Env, Envs, Running, build_wheel, key_of, resolve

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

ALL = "airflow,prefect,kfp,testing"


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("dist"))


#: Every combination a user would pick: each orchestrator alone, any two or three, with
#: or without the test server, and ``all`` (which adds the container backend's Docker
#: SDK, a dependency of Prefect's already).
COMBINATIONS = [
    ",".join(c)
    for n in (1, 2, 3, 4)
    for c in itertools.combinations(("airflow", "prefect", "kfp", "testing"), n)
    if set(c) & set(KEY_PACKAGES)
] + ["all"]


@pytest.fixture(scope="session")
def resolved(wheel: Path) -> dict[str, dict[str, str]]:
    """What each combination installs today (uv's resolution from PyPI)."""
    with ThreadPoolExecutor(6) as pool:
        found = pool.map(lambda c: resolve(wheel, c), COMBINATIONS)
        return dict(zip(COMBINATIONS, found, strict=True))


@dataclass
class Smokes:
    """The session's environments and their smoke runs, started side by side."""

    envs: Envs
    #: The run of each orchestrator's extra alone; None where the all-extras
    #: environment has that orchestrator with the same deciding versions (its runs
    #: prove that set already).
    alone: dict[str, Running | None]
    page_all: Running
    page_testing: Running


@pytest.fixture(scope="session")
def smokes(
    wheel: Path, resolved: dict[str, dict[str, str]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Smokes]:
    envs = Envs(tmp_path_factory.mktemp("envs"), wheel)
    with ThreadPoolExecutor(2) as pool:  # most of it is waiting on PyPI and the disk
        everything, testing = pool.map(envs.get, (ALL, "testing"))
    needed = [o for o in SMOKES if key_of(resolved[o], o) != key_of(everything.versions, o)]
    with ThreadPoolExecutor(3) as pool:
        list(pool.map(envs.get, needed))
    # One process each, side by side: most of their time is spent waiting (servers
    # starting, jobs running).
    alone: dict[str, Running | None] = dict.fromkeys(SMOKES)
    for orchestrator in needed:
        work = _work(tmp_path_factory, f"smoke-{orchestrator}")
        (work / "smoke.py").write_text(textwrap.dedent(SMOKES[orchestrator][0]))
        alone[orchestrator] = envs.get(orchestrator).start("smoke.py", cwd=work)
    started = Smokes(
        envs,
        alone,
        _start_page(everything, _work(tmp_path_factory, "page-all"), recipes=True),
        _start_page(testing, _work(tmp_path_factory, "page-testing"), recipes=False),
    )
    yield started
    for running in (*alone.values(), started.page_all, started.page_testing):
        if running is not None and running.proc.poll() is None:  # a test failed first
            running.proc.kill()
            running.proc.wait()


def _work(factory: pytest.TempPathFactory, name: str) -> Path:
    """A folder with no clone and no shared/upstream above it."""
    folder = factory.mktemp(name) / "work"
    folder.mkdir()
    assert not any((p / "shared" / "upstream").exists() for p in (folder, *folder.parents))
    return folder


# ----------------------------------------------------------------- each extra alone

AIRFLOW_SMOKE = '''
import base64, json, os, pathlib, secrets

work = pathlib.Path.cwd()
home = work / "airflow-home"
(work / "dags").mkdir()
os.environ.update(
    AIRFLOW_HOME=str(home),
    AIRFLOW__CORE__DAGS_FOLDER=str(work / "dags"),
    AIRFLOW__CORE__LOAD_EXAMPLES="False",
    AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home}/airflow.db",
    AIRFLOW__CORE__FERNET_KEY=base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),
    AIRFLOW__API_AUTH__JWT_SECRET=secrets.token_hex(32),
    AIRFLOW_CONN_KF=json.dumps(
        {"conn_type": "kubeflow_trainer",
         "extra": {"backend": "local", "state_dir": str(work / "state")}}
    ),
)
(work / "dags" / "smoke.py").write_text("""
from airflow.sdk import dag, task

@dag(schedule=None)
def smoke():
    @task.kubeflow_trainer(kubeflow_trainer_conn_id="kf", deferrable=True)
    def train(lr: float = 0.1) -> dict:
        return {"loss": round(1 - lr, 3)}

    @task
    def check(trained: dict) -> dict:
        return {**trained, "checked": True}

    check(train(lr=0.5))

smoke()
""")
from airflow.utils.db import initdb
from airflow.dag_processing.dagbag import DagBag
from airflow.models.xcom import XComModel
from airflow.utils.session import create_session
from sqlalchemy import select

initdb()
bag = DagBag()
assert not bag.import_errors, bag.import_errors
run = bag.get_dag("smoke").test()
with create_session() as session:
    value = session.scalar(select(XComModel.value).where(
        XComModel.run_id == run.run_id, XComModel.task_id == "check",
        XComModel.key == "return_value"))
print("RESULT", str(run.state), json.dumps(value))
'''

PREFECT_SMOKE = """
import json, os, pathlib, tempfile

os.environ["PREFECT_HOME"] = tempfile.mkdtemp()
os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] = "120"
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ["DO_NOT_TRACK"] = "1"

from prefect import flow
from kf_trainer_prefect import trainjob_task

STATE = str(pathlib.Path.cwd() / "state")


@trainjob_task(credentials={"backend": "local", "state_dir": STATE})
def train(lr: float = 0.1) -> dict:
    return {"loss": round(1 - lr, 3)}


@flow
def smoke() -> dict:
    return train(lr=0.5)


print("RESULT", "success", json.dumps(smoke()))
"""

KFP_SMOKE = """
import json, pathlib

from kfp import dsl, local
from kf_trainer_kfp import ComponentImage, trainjob_component

work = pathlib.Path.cwd()


def train(lr: float = 0.1) -> dict:
    return {"loss": round(1 - lr, 3)}


train_op = trainjob_component(train, component_image=ComponentImage.current_environment())


@dsl.pipeline
def smoke(backend_config: dict) -> str:
    return train_op(lr=0.5, backend_config=backend_config).outputs["result_json"]


local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(work / "root"))
run = smoke(backend_config={"backend": "local", "state_dir": str(work / "state")})
print("RESULT", "success", json.dumps(json.loads(run.output)))
"""

SMOKES = {
    "airflow": (AIRFLOW_SMOKE, {"loss": 0.5, "checked": True}),
    "prefect": (PREFECT_SMOKE, {"loss": 0.5}),
    "kfp": (KFP_SMOKE, {"loss": 0.5}),
}


@pytest.mark.parametrize("extra", list(SMOKES))
def test_each_orchestrator_extra_alone_runs_a_job(
    smokes: Smokes, resolved: dict[str, dict[str, str]], extra: str
) -> None:
    running = smokes.alone[extra]
    if running is None:
        everything = smokes.envs.get(ALL)
        assert key_of(resolved[extra], extra) == key_of(everything.versions, extra)
        pytest.skip(
            f"[{extra}] resolves to the versions the all-extras environment runs its "
            f"{extra} recipe with: {dict(zip(KEY_PACKAGES[extra], key_of(everything.versions, extra), strict=True))}"
        )
    done = running.result(timeout=900)
    _, expected = SMOKES[extra]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    [result] = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    _, state, value = result.split(" ", 2)
    assert state.endswith("success"), result
    assert json.loads(value) == expected
    # The other orchestrators were not installed with it.
    others = {"airflow": "apache-airflow", "prefect": "prefect", "kfp": "kfp"}
    installed = smokes.envs.get(extra).versions
    assert {n for n in others.values() if n in installed} == {others[extra]}


# ---------------------------------------------------------------- docs/testing.md

FRAGMENT_TEST = """
from kf_trainer_core.client import TrainerClient
from kf_trainer_core.config import KubernetesConfig
from kf_trainer_core.spec import CustomTrainer, TrainJobSpec


def train():
    return 1


def test_fragment(kube, kubeconfig_path):
    assert kube.fidelity == "builtin", kube.fidelity
    client = TrainerClient(KubernetesConfig(kubeconfig=str(kubeconfig_path)))
    name = client.submit(TrainJobSpec(trainer=CustomTrainer(train))).job.name
{body}
"""

_NAMED = re.compile(r"# ([\w/]+\.py)\b")
#: The recipes' files: they need their orchestrator's extra.
_RECIPE = re.compile(r"^(dags/|test_(airflow|prefect|kfp)_)")


def page_files(recipes: bool) -> dict[str, str]:
    """docs/testing.md's Python blocks as files: a block whose first line names a file
    (``# conftest.py``) is that file (blocks naming one file are joined); any other is
    a fragment, run inside a test with a client and a job."""
    files: dict[str, str] = {}
    fragments = []
    for block in re.findall(r"```python\n(.*?)```", (DOCS / "testing.md").read_text(), re.DOTALL):
        named = _NAMED.match(block.splitlines()[0])
        if named is None:
            fragments.append(block)
        elif recipes or not _RECIPE.match(named.group(1)):
            files[named.group(1)] = files.get(named.group(1), "") + block
    for i, fragment in enumerate(fragments):
        files[f"test_fragment_{i}.py"] = FRAGMENT_TEST.format(
            body=textwrap.indent(fragment, "    ")
        )
    return files


def _start_page(env: Env, work: Path, recipes: bool) -> Running:
    files = page_files(recipes)
    assert recipes is False or {"dags/nightly.py", "test_airflow_dag.py"} <= set(files)
    for name, text in files.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(text)
    (work / "tests.txt").write_text(
        "\n".join(n for n in files if Path(n).name.startswith("test_")) + "\n"
    )
    return env.start(
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-W",
        "error::RuntimeWarning",
        cwd=work,
        XDG_CACHE_HOME=str(work / ".cache"),  # derive the schemas from scratch
    )


def _page_passed(env: Env, running: Running) -> None:
    done = running.result(timeout=900)
    work = running.cwd
    tests = (work / "tests.txt").read_text().split()
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert f"{len(tests)} passed" in done.stdout, done.stdout[-3000:]
    # The installed copy ran, not the clone's.
    where = env.run("-c", "import kf_trainer_core; print(kf_trainer_core.__file__)", cwd=work)
    assert where.stdout.startswith(str(env.root)), where.stdout


def test_all_extras_together_run_the_testing_page_and_its_recipes(smokes: Smokes) -> None:
    """A DAG through ``dag.test()``, a Prefect flow and a KFP pipeline on the test
    server, from the page as written (and the page's other examples beside them)."""
    _page_passed(smokes.envs.get(ALL), smokes.page_all)


def test_the_testing_extra_alone_runs_the_test_server_examples(smokes: Smokes) -> None:
    _page_passed(smokes.envs.get("testing"), smokes.page_testing)


# ------------------------------------------------------------------ combinations


def test_every_combination_resolves_to_what_the_smokes_ran(
    smokes: Smokes, resolved: dict[str, dict[str, str]]
) -> None:
    """Installing any combination today gives each orchestrator the versions that
    decide whether it works, as one of the smoked environments has them."""
    ran: dict[str, set[tuple[str | None, ...]]] = {o: set() for o in KEY_PACKAGES}
    for orchestrator in KEY_PACKAGES:
        ran[orchestrator].add(key_of(smokes.envs.get(ALL).versions, orchestrator))
        if smokes.alone[orchestrator] is not None:
            ran[orchestrator].add(key_of(smokes.envs.get(orchestrator).versions, orchestrator))
    unproven = {}
    for combo, pins in resolved.items():
        chosen = set(KEY_PACKAGES) if combo == "all" else set(combo.split(",")) & set(KEY_PACKAGES)
        for orchestrator in chosen:
            key = key_of(pins, orchestrator)
            if key not in ran[orchestrator]:
                unproven[f"[{combo}] {orchestrator}"] = dict(
                    zip(KEY_PACKAGES[orchestrator], key, strict=True)
                )
    assert not unproven, f"these resolve to sets no smoke ran: {unproven}; smoked: {ran}"


# ----------------------------------------------------------------- what it says


def test_the_installed_package_says_its_version_and_where_its_docs_are(
    smokes: Smokes, wheel: Path, tmp_path: Path
) -> None:
    env = smokes.envs.get("testing")
    version = wheel.name.split("-")[1]
    said = env.run(
        "-c",
        "import kf_trainer_core, json; from importlib.metadata import metadata; "
        "m = metadata('kf-trainer-suite'); "
        "print(json.dumps([kf_trainer_core.__version__, m.get_all('Project-URL')]))",
        cwd=tmp_path,
    )
    assert said.returncode == 0, said.stderr
    installed, urls = json.loads(said.stdout)
    assert installed == version
    labels = {u.split(",", 1)[0] for u in urls}
    assert labels == {"Homepage", "Documentation", "Repository", "Changelog", "Issues"}
    assert all(", https://github.com/kf-trainer-suite/kf-trainer-suite" in u for u in urls)
    helped = env.run("-m", "kf_trainer_core.cli", "--help", cwd=tmp_path)
    assert helped.returncode == 0, helped.stderr
    [docs] = [ln.strip() for ln in helped.stdout.splitlines() if ln.strip().startswith("Docs: ")]
    assert docs.startswith("Docs: https://github.com/kf-trainer-suite/kf-trainer-suite/blob/")
    assert docs.endswith("/docs/cli.md")
    shown = env.run("-m", "kf_trainer_core.cli", "--version", cwd=tmp_path)
    assert version in shown.stdout
