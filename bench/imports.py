"""Import cost: what importing each adapter's user-facing module adds to a fresh
interpreter that has already imported its orchestrator (``airflow.sdk``, ``prefect``,
``kfp.dsl``) — the price every DAG file, flow file or pipeline file pays.

Each run is a new interpreter that imports the orchestrator, then times the import of
the module alone (``time.perf_counter`` around ``importlib.import_module``): the
orchestrator's own import, seconds long and noisy on a shared machine, never enters the
difference. The median of several runs is reported, and whether the import pulled in
``kubernetes`` / ``kubernetes_asyncio`` (it must not).

Baselines, measured the same way: the Kubeflow SDK's ``kubeflow.trainer`` in its venv
(what an adapter built on the SDK would add at least) and the ``kubernetes`` client.
The adapters are being written while this runs: a module that does not exist, or is
still an empty placeholder, is reported as not available.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import (
    JSON,
    REPO,
    Settings,
    median,
    ratio,
    sdk_python,
    sdk_unavailable_reason,
)

#: (adapter, orchestrator base, candidate user-facing modules: the first found wins).
#: A base ``module:attr`` also resolves a lazily imported attribute (airflow.sdk loads
#: ``BaseOperator`` on first access): the figures are given both beyond the module alone
#: (the brief's definition) and beyond the module and that attribute (what any operator
#: module, however small, pays anyway).
ADAPTERS = [
    (
        "airflow",
        "airflow.sdk:BaseOperator",
        ["kf_trainer_airflow.operators.trainjob", "kf_trainer_airflow.operators"],
    ),
    (
        "airflow sensor",
        "airflow.sdk:BaseSensorOperator",
        ["kf_trainer_airflow.sensors.trainjob"],
    ),
    (
        "airflow decorator",
        "airflow.sdk:BaseOperator",
        ["kf_trainer_airflow.decorators.trainer"],
    ),
    (
        "airflow triggerer",
        "airflow.triggers.base:BaseTrigger",
        ["kf_trainer_airflow.triggers.trainjob", "kf_trainer_airflow.triggers"],
    ),
    # `import prefect` loads its `task` decorator (prefect.tasks, the task engine's
    # caching and result machinery) lazily, on first use: any module of Prefect tasks
    # pays for it, as any operator module pays for Airflow's BaseOperator.
    ("prefect", "prefect:task", ["kf_trainer_prefect.tasks", "kf_trainer_prefect"]),
    ("kfp", "kfp.dsl", ["kf_trainer_kfp.components", "kf_trainer_kfp"]),
]
#: What a DAG file does next, timed separately: building its first operator validates
#: the spec (and so imports the pydantic models, which the module import leaves out).
THEN = {
    "airflow": (
        "module.TrainJobOperator(task_id='train', kubeflow_trainer_conn_id=None, "
        "trainer={'func': {'source': 'def train():\\n    return 1\\n'}, 'num_nodes': 2})"
    ),
}
#: Target: what the Airflow operator module may add.
AIRFLOW_TARGET_MS = 50.0
#: Target (issue 27): what every user-facing module may add beyond its orchestrator's
#: own base classes (``own_ms``: the base module and its lazily loaded class excluded).
MODULE_TARGET_MS = 50.0
#: Client libraries the adapters' user-facing modules must not load.
HEAVY = ("kubernetes", "kubernetes_asyncio")

_PROBE = """
import gc, importlib, json, sys, time
base, attr, target, heavy = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(",")
settle, then = sys.argv[5] == "1", sys.argv[6]
t0 = time.perf_counter()
module = importlib.import_module(base) if base else None
t1 = time.perf_counter()
if attr:
    getattr(module, attr)
t2 = time.perf_counter()
out = {"base_ms": (t1 - t0) * 1000, "lazy_ms": (t2 - t1) * 1000}
if settle:
    # The orchestrator's import leaves a full collection due; whoever allocates next
    # pays it. Pay it here, so that it is counted as the orchestrator's.
    gc.collect()
    out["settle_ms"] = (time.perf_counter() - t2) * 1000
    t2 = time.perf_counter()
before = set(sys.modules)
out["base_loaded"] = sorted(h for h in heavy if h in before)
try:
    module = importlib.import_module(target)
except ModuleNotFoundError as exc:
    missing = exc.name or ""
    if target == missing or target.startswith(missing + "."):
        out["missing"] = missing
    else:
        out["error"] = repr(exc)
except Exception as exc:
    out["error"] = repr(exc)
else:
    out["own_ms"] = (time.perf_counter() - t2) * 1000
    if then:
        t3 = time.perf_counter()
        exec(then, {"module": module})
        out["then_ms"] = (time.perf_counter() - t3) * 1000
    public = [n for n in vars(module) if not n.startswith("_") and n != "annotations"]
    out["public_names"] = len(public)
    new = set(sys.modules) - before
    out["new_modules"] = len(new)
    # Any module of the client packages counts, not only the top-level package: an
    # orchestrator may have loaded `kubernetes` itself while the adapter loads its APIs.
    out["pulled"] = {
        h: n for h in heavy if (n := sum(1 for m in new if m == h or m.startswith(h + ".")))
    }
print(json.dumps(out))
"""


def split_base(base: str) -> tuple[str, str]:
    module, _, attr = base.partition(":")
    return module, attr


def probe(
    python: str,
    base: str,
    target: str,
    env: dict[str, str],
    isolated: bool,
    settle: bool = True,
    then: str = "",
) -> JSON:
    """One fresh interpreter: import ``base`` (and resolve its attribute), settle the
    garbage collector (unless told not to), time ``target``, then time ``then`` (code run
    with the imported module as ``module``)."""
    module, attr = split_base(base)
    argv = [python, *(["-I"] if isolated else []), "-c", _PROBE, module, attr, target]
    proc = subprocess.run(
        [*argv, ",".join(HEAVY), "1" if settle else "0", then],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=REPO,
        check=False,
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return {"error": (proc.stderr or proc.stdout)[-500:]}
    data: JSON = json.loads(lines[-1])
    return data


_MARK = "kf-bench: target import starts"


def contributors(python: str, base: str, target: str, env: dict[str, str], top: int = 5) -> JSON:
    """The modules that cost ``target``'s import the most (self time, from one
    ``python -X importtime`` run after the base): what to make lazy first."""
    module, attr = split_base(base)
    code = (
        "import importlib, sys\n"
        "base, attr, target = sys.argv[1:4]\n"
        "m = importlib.import_module(base) if base else None\n"
        "attr and getattr(m, attr)\n"
        "import gc; gc.collect()  # the orchestrator's pending collection, as in probe()\n"
        f"print({_MARK!r}, file=sys.stderr, flush=True)\n"
        "importlib.import_module(target)\n"
    )
    proc = subprocess.run(
        [python, "-X", "importtime", "-c", code, module, attr, target],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=REPO,
        check=False,
    )
    rows: list[tuple[float, str]] = []
    started = False
    for line in proc.stderr.splitlines():
        if line.strip() == _MARK:
            started = True
            continue
        parts = line.split("|")
        if not started or not line.startswith("import time:") or len(parts) != 3:
            continue
        if not parts[1].strip().isdigit():
            continue  # the header line
        self_us = int(parts[0].split(":", 1)[1])
        rows.append((self_us / 1000, parts[2].strip()))
    rows.sort(reverse=True)
    return {"top": [{"module": n, "self_ms": round(t, 1)} for t, n in rows[:top]]}


def measure(
    python: str,
    base: str,
    target: str,
    runs: int,
    env: dict[str, str],
    isolated: bool = False,
    then: str = "",
) -> JSON:
    """Median over ``runs`` fresh interpreters. ``ms``: beyond the base module alone
    (its lazy attribute included); ``own_ms``: beyond the module and the attribute;
    ``unsettled_ms``: ``own_ms`` when the orchestrator's pending collection is left to
    fall on the import; ``then_ms``: the ``then`` code after the import."""
    samples = []
    unsettled = []
    for _ in range(runs):
        data = probe(python, base, target, env, isolated, then=then)
        if "own_ms" not in data:
            return data  # missing or broken: no point in repeating
        samples.append(data)
        if base:
            raw = probe(python, base, target, env, isolated, settle=False)
            if "own_ms" in raw:
                unsettled.append(raw["own_ms"])
    extra: JSON = {}
    if unsettled:
        extra["unsettled_ms"] = median(unsettled)
        extra["settle_ms"] = median([s.get("settle_ms", 0.0) for s in samples])
    if then:
        extra["then_ms"] = median([s["then_ms"] for s in samples if "then_ms" in s])
    return {
        **extra,
        "ms": median([s["own_ms"] + s["lazy_ms"] for s in samples]),
        "own_ms": median([s["own_ms"] for s in samples]),
        "lazy_ms": median([s["lazy_ms"] for s in samples]),
        "ms_samples": [round(s["own_ms"] + s["lazy_ms"], 1) for s in samples],
        "base_ms": median([s["base_ms"] for s in samples]),
        "public_names": samples[-1]["public_names"],
        "new_modules": samples[-1]["new_modules"],
        "pulled": samples[-1]["pulled"],
        "base_loaded": samples[-1]["base_loaded"],
    }


def run(settings: Settings, workdir: Path) -> JSON:
    """Measure every adapter that exists, and the baselines."""
    runs = 1 if settings.quick else 5
    home = Path(tempfile.mkdtemp(prefix="imports-", dir=workdir))
    # Orchestrators write their home folders on import: keep those in the scratch dir.
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home / "airflow"),
        "PREFECT_HOME": str(home / "prefect"),
    }
    env.pop("PYTHONPATH", None)
    # Steady state is what a DAG file pays: compile the suite's modules first, as their
    # first import would, so that no run pays for writing bytecode.
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(REPO / "src")],
        capture_output=True,
        timeout=300,
        check=False,
    )
    out: JSON = {"runs": runs, "adapters": [], "baselines": {}}
    for adapter, base, candidates in ADAPTERS:
        if settings.quick and adapter == "airflow triggerer":
            continue
        settings.note(f"imports: {adapter}")
        entry: JSON = {"adapter": adapter, "base": base}
        for target in candidates:
            data = measure(sys.executable, base, target, runs, env, then=THEN.get(adapter, ""))
            if "missing" in data:
                continue
            if "ms" in data and data["public_names"] == 0:
                entry.update(module=target, status="placeholder", **data)
                continue  # an empty package: try no further, report it as not available
            entry.update(module=target, status="measured" if "ms" in data else "broken", **data)
            if "ms" in data and not settings.quick:
                entry["contributors"] = contributors(sys.executable, base, target, env)["top"]
            break
        else:
            entry.setdefault("status", "not available")
            entry.setdefault("module", " / ".join(candidates))
        out["adapters"].append(entry)
    settings.note("imports: baselines")
    if not settings.quick:  # references only: the quick run keeps to the comparison
        out["baselines"]["kubernetes"] = {
            "module": "kubernetes",
            **measure(sys.executable, "", "kubernetes", runs, env),
        }
        out["baselines"]["core_client"] = {
            "module": "kf_trainer_core.client",
            **measure(sys.executable, "", "kf_trainer_core.client", runs, env),
        }
    sdk = sdk_python(settings)
    if sdk is None:
        out["baselines"]["sdk"] = {"skipped": sdk_unavailable_reason()}
    else:
        out["baselines"]["sdk"] = {
            "module": "kubeflow.trainer",
            **measure(str(sdk), "", "kubeflow.trainer", runs, env, isolated=True),
        }
    sdk_ms = out["baselines"]["sdk"].get("ms")
    for entry in out["adapters"]:
        if entry.get("status") == "measured":
            entry["ratio_vs_sdk"] = ratio(sdk_ms, entry["ms"])
    out["module_target_ms"] = MODULE_TARGET_MS
    for entry in out["adapters"]:
        if entry.get("status") == "measured":
            entry["target_met"] = entry["own_ms"] <= MODULE_TARGET_MS
    airflow: JSON = next((a for a in out["adapters"] if a["adapter"] == "airflow"), {})
    out["airflow_target_ms"] = AIRFLOW_TARGET_MS
    measured = airflow.get("status") == "measured"
    out["airflow_target_met"] = airflow["ms"] <= AIRFLOW_TARGET_MS if measured else None
    # The same target, counting Airflow's lazily loaded BaseOperator as Airflow's cost.
    out["airflow_own_target_met"] = airflow["own_ms"] <= AIRFLOW_TARGET_MS if measured else None
    return out
