"""Nothing of the user's becomes code, shell or pip options that was not meant to; no
credential travels in clear text or is quoted in an error; bad input fails before
submission, naming the field and the fix (issue 14, items 6-11 and "Bad input")."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from kf_trainer_core import spec as spec_module
from kf_trainer_core.backends.local import launch
from kf_trainer_core.base import timeutil
from kf_trainer_core.config import KubernetesConfig, LocalConfig
from kf_trainer_core.errors import SpecError
from kf_trainer_core.fields import checks
from kf_trainer_core.manifest.builder import build_trainjob, custom_trainer_command
from kf_trainer_core.manifest.runtimes import RuntimeInfo
from kf_trainer_core.spec import (
    Annotations,
    ContainerPatch,
    CustomTrainer,
    CustomTrainerContainer,
    HuggingFaceDatasetInitializer,
    Initializer,
    SecretKeyRef,
    TrainerArgs,
    TrainFunction,
    TrainJobSpec,
    function,
)
from kf_trainer_core.tasks.backend_fields import config_from_fields

HF = "hf_" + "a1B2" * 9  # the shape of a HuggingFace token (not a real one)
GHP = "ghp_" + "Z9y8" * 9
AKIA = "AKIA" + "ABCDEFGHIJKLMNOP"


def _torch() -> RuntimeInfo:
    return RuntimeInfo.guess("torch-distributed", "ClusterTrainingRuntime")


# ------------------------------------------------------------------ item 6: names


@pytest.mark.parametrize(
    "name", ["my-train", "x$(touch /tmp/pwned)", "x;import os;os.system('id')#", "class", "1x"]
)
def test_a_name_that_is_no_identifier_is_refused_before_submission(name: str) -> None:
    with pytest.raises(SpecError) as info:
        CustomTrainer({"ref": "os.path:join", "name": name, "embed": False})
    assert info.value.fields == ["CustomTrainer.func.name"]
    assert "not a Python identifier" in str(info.value)
    assert "Fix:" in str(info.value)


@pytest.mark.parametrize("ref", ["os.class:join", "os.path:import"])
def test_a_reference_of_keywords_is_refused(ref: str) -> None:
    with pytest.raises(SpecError, match=r"CustomTrainer\.func\.ref"):
        CustomTrainer({"ref": ref, "embed": False})


def test_the_program_generator_refuses_what_is_not_an_identifier() -> None:
    # A second line of defence for callers of the generator itself.
    with pytest.raises(ValueError, match="not a Python identifier"):
        function.program_for("x;import os", None, {}, import_ref="os.path:join")
    with pytest.raises(ValueError, match="dotted module path"):
        function.program_for("f", None, {}, import_ref="os;x:join")


def test_the_shell_script_holds_no_data_of_the_user() -> None:
    trainer = CustomTrainer(
        "def train():\n    return '$(touch x)`id`'\n",
        packages_to_install=["numpy>=1", "name @ https://h/x.whl"],
        pip_index_urls=["https://pypi.org/simple", "https://h/simple"],
    )
    command = custom_trainer_command(trainer, _torch())
    script = command[2]
    for data in ("numpy", "https://", "touch", "$(touch"):
        assert data not in script
    assert command[3:5] == ["kf-trainer", function.program_for("train", trainer.func.source, {})]
    assert command[5:] == [
        "--index-url",
        "https://pypi.org/simple",
        "--extra-index-url",
        "https://h/simple",
        "--",
        "numpy>=1",
        "name @ https://h/x.whl",
    ]
    # pip receives them as "$@": quoted, after "--".
    assert '"$@"' in script
    program = launch.parse_trainer(command, [])
    assert program.packages == ("numpy>=1", "name @ https://h/x.whl")
    assert program.index_urls == ("https://pypi.org/simple", "https://h/simple")


def test_the_generated_command_runs_shell_text_in_the_function_verbatim(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    source = (
        "def train():\n"
        f"    s = '$(touch {marker})`touch {marker}`'\n"
        "    t = '''\nfrom __future__ import annotations\n'''\n"
        "    return [s, t]\n"
    )
    command = custom_trainer_command(CustomTrainer(source), _torch())
    env = {
        **os.environ,
        "KF_TRAINER_LAUNCHER": sys.executable,
        function.TERMINATION_LOG_ENV: str(tmp_path / "term"),
    }
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert not marker.exists()
    found, value = function.result_from_log(done.stdout.splitlines())
    assert found
    assert value == [f"$(touch {marker})`touch {marker}`", "\nfrom __future__ import annotations\n"]


# -------------------------------------------------------------------- item 7: pip


@pytest.mark.parametrize(
    "package",
    ["--index-url=http://evil/simple", "-r/etc/passwd", "--trusted-host=evil", "-e .", "git+x"],
)
def test_pip_options_are_not_requirements(package: str) -> None:
    with pytest.raises(SpecError) as info:
        CustomTrainer("def f():\n    pass\n", packages_to_install=["numpy", package])
    assert info.value.fields == ["CustomTrainer.packages_to_install[1]"]
    assert "requirement" in str(info.value)


@pytest.mark.parametrize(
    "url", ["pypi.org/simple", "ftp://h/simple", "file:///srv/simple", "https://", "http://h /s"]
)
def test_index_urls_must_be_http_urls(url: str) -> None:
    with pytest.raises(SpecError) as info:
        CustomTrainer("def f():\n    pass\n", pip_index_urls=[url])
    assert info.value.fields == ["CustomTrainer.pip_index_urls[0]"]


def test_index_url_errors_do_not_quote_the_url() -> None:
    with pytest.raises(SpecError) as info:
        CustomTrainer("def f():\n    pass\n", pip_index_urls=["user:s3cr3tpass@h/simple"])
    assert "s3cr3tpass" not in str(info.value)


def test_the_local_backend_passes_pip_only_requirements() -> None:
    # A manifest not built here: only what follows "--" is installed.
    command = ["bash", "-c", "x", "kf-trainer", "print(1)", "-r/etc/passwd", "--", "numpy"]
    assert launch.parse_trainer(command, []).packages == ("numpy",)
    assert launch.parse_trainer(command[:6], []).packages == ()


# ------------------------------------------------------------ item 8: kubeconfigs


SECRET = "s3cr3t-T0KEN-value-9f8e7d"


@pytest.mark.parametrize(
    "content",
    [
        f"apiVersion: v1\nusers:\n- name: u\n  user:\n    token: {SECRET}: x\n",
        f"users: [{{token: {SECRET}\n",
        f'{{"users": [{{"token": "{SECRET}"',
        f"- {SECRET}\n",
        f"{SECRET}",
    ],
    ids=["yaml-mapping-error", "flow-unclosed", "json-unclosed", "a-list", "a-scalar"],
)
def test_a_malformed_inline_kubeconfig_never_shows_its_text(content: str) -> None:
    with pytest.raises(SpecError) as info:
        KubernetesConfig(kubeconfig_content=content)
    err = info.value
    assert SECRET not in str(err)
    assert SECRET not in repr(err)
    assert err.fields == ["KubernetesConfig.kubeconfig_content"]
    assert "Fix:" in str(err)
    chained: BaseException | None = err
    while chained is not None:  # nothing kept along with it quotes the text either
        assert SECRET not in str(chained)
        chained = chained.__cause__ or chained.__context__


def test_a_malformed_kubeconfig_file_names_its_path_not_its_text(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text(f"users:\n- token: {SECRET}: x\n")
    cfg = KubernetesConfig(kubeconfig=str(path))
    with pytest.raises(SpecError) as info:
        cfg.check_usable()
    assert SECRET not in str(info.value)
    with pytest.raises(SpecError) as info:
        cfg.resolve_namespace()
    assert SECRET not in str(info.value)


def test_a_missing_kubeconfig_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent"
    with pytest.raises(SpecError) as info:
        KubernetesConfig(kubeconfig=str(missing)).check_usable()
    assert str(missing) in str(info.value)
    assert info.value.fields == ["kubeconfig"]


def test_the_client_library_s_errors_lose_the_kubeconfig_s_secrets() -> None:
    from kf_trainer_core.config import loading_errors

    doc = {
        "apiVersion": "v1",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": SECRET}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    cfg = KubernetesConfig(kubeconfig_content=yaml.safe_dump(doc))
    with pytest.raises(SpecError) as info, loading_errors(cfg):
        raise RuntimeError(f"bad user token {SECRET}")
    assert SECRET not in str(info.value)
    assert "***" in str(info.value)


# ---------------------------------------------------------- item 9: credentials


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: CustomTrainer("def f():\n    pass\n", env={"HF_TOKEN": "x" * 12}), "env.HF_TOKEN"),
        (lambda: CustomTrainer("def f():\n    pass\n", env={"MY_VAR": HF}), "env.MY_VAR"),
        (lambda: CustomTrainerContainer("python:3.11", env={"GH": GHP}), "env.GH"),
        (
            lambda: CustomTrainer("def f():\n    pass\n", env={"AWS_SECRET_ACCESS_KEY": "abc"}),
            "env.AWS_SECRET_ACCESS_KEY",
        ),
        (lambda: CustomTrainer("def f():\n    pass\n", env={"KEY_ID": AKIA}), "env.KEY_ID"),
        (
            lambda: HuggingFaceDatasetInitializer(storage_uri="hf://a/b", env={"ACCESS_TOKEN": HF}),
            "env.ACCESS_TOKEN",
        ),
        (
            lambda: ContainerPatch(name="dataset-initializer", env={"ACCESS_TOKEN": HF}),
            "env.ACCESS_TOKEN",
        ),
        (lambda: CustomTrainer("def f(t):\n    pass\n", func_args={"t": HF}), "func_args"),
        (lambda: TrainerArgs(["--token", HF]), "args"),
        (lambda: Annotations({"a": GHP}), "annotations"),
    ],
    ids=[
        "trainer-hf-token",
        "token-shaped-value",
        "container-github",
        "aws-secret",
        "aws-key-id",
        "initializer-access-token",
        "runtime-patch",
        "func-args",
        "trainer-args",
        "annotation",
    ],
)
def test_clear_text_credentials_are_refused(make: Any, field: str) -> None:
    with pytest.raises(SpecError) as info:
        make()
    err = info.value
    assert any(f.endswith(field) for f in err.fields), err.fields
    for secret in (HF, GHP, AKIA, "x" * 12):
        assert secret not in str(err)
    if field.startswith("env."):
        assert "SecretKeyRef" in str(err)


def test_the_access_token_refusal_has_no_env_bypass() -> None:
    spec = {
        "initializer": {
            "dataset": {
                "type": "HuggingFaceDatasetInitializer",
                "storage_uri": "hf://a/b",
                "env": {"ACCESS_TOKEN": HF},
            }
        }
    }
    with pytest.raises(SpecError) as info:
        TrainJobSpec.parse(spec)
    assert info.value.fields == ["initializer.dataset.env.ACCESS_TOKEN"]


def test_secret_references_and_plain_values_pass() -> None:
    trainer = CustomTrainer(
        "def f():\n    pass\n",
        env={"HF_TOKEN": SecretKeyRef(name="hf", key="token"), "HF_HOME": "/cache", "N": 3},
    )
    assert trainer.env is not None
    assert trainer.env["N"] == "3"
    Initializer(dataset=HuggingFaceDatasetInitializer(storage_uri="hf://a/b", secret_ref="hf"))


def test_names_that_look_like_secrets_warn() -> None:
    with pytest.warns(checks.ClearTextSecretWarning, match="SecretKeyRef"):
        CustomTrainer("def f():\n    pass\n", env={"DB_PASSWORD": "hunter22"})
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        CustomTrainer("def f():\n    pass\n", env={"DB_PASSWORD": "hunter22"})
    assert all("hunter22" not in str(w.message) for w in seen)


def test_env_errors_keep_the_variable_name() -> None:
    with pytest.raises(SpecError) as info:
        TrainJobSpec.parse(
            {
                "trainer": {
                    "type": "CustomTrainer",
                    "func": "def f():\n pass\n",
                    "env": {"HF_HOME": 5j},
                }
            }
        )
    assert info.value.fields == ["trainer.env.HF_HOME"]
    assert "SecretKeyRef" in str(info.value)


# ---------------------------------------------------------- item 10: namespaces


@pytest.mark.parametrize("namespace", ["../../x", "Team_A", "a/b", "", "x" * 64, "-a"])
def test_namespaces_are_rfc1123_labels_everywhere(namespace: str) -> None:
    with pytest.raises(SpecError, match="namespace"):
        LocalConfig(namespace=namespace)
    with pytest.raises(SpecError, match="namespace"):
        KubernetesConfig(namespace=namespace)
    with pytest.raises(SpecError, match="namespace"):
        build_trainjob(
            TrainJobSpec(trainer=CustomTrainer("def f():\n    pass\n")), namespace=namespace
        )


# ------------------------------------------------------- item 11: __future__ lines


def test_the_source_reaches_the_program_byte_for_byte() -> None:
    source = (
        "from __future__ import annotations\n"
        "def train() -> Missing:\n"
        '    doc = """\nfrom __future__ import division\n  from __future__ import x\n"""\n'
        "    return doc\n"
    )
    trainer = CustomTrainer(source)
    name, src, _ = trainer.func.resolved()
    program = function.program_for(name, src, None)
    assert src is not None
    assert src in program
    assert "from __future__ import division\n" in program
    scope: dict[str, Any] = {}
    exec(compile(program, "p", "exec"), scope)
    assert scope["train"]() == "\nfrom __future__ import division\n  from __future__ import x\n"


def test_a_misplaced_future_import_fails_at_build_time() -> None:
    source = "import os\nfrom __future__ import annotations\ndef train():\n    pass\n"
    with pytest.raises(SpecError, match="does not compile"):
        build_trainjob(
            TrainJobSpec(trainer=CustomTrainer(TrainFunction(source=source, name="train")))
        )


def test_a_token_given_where_something_else_belongs_is_not_quoted() -> None:
    with pytest.raises(SpecError) as info:
        TrainJobSpec.parse(
            {"trainer": {"type": "CustomTrainer", "func": "def f():\n pass\n", "func_args": HF}}
        )
    assert HF not in str(info.value)
    with pytest.raises(SpecError) as info:
        TrainJobSpec.parse({"runtime": {"name": "x", "kind": GHP}})
    assert GHP not in str(info.value)


def test_pip_receives_the_requirements_after_its_options_end(tmp_path: Path) -> None:
    # A stand-in `python` on PATH records how the script calls pip.
    record = tmp_path / "pip-args"
    shim = tmp_path / "bin" / "python"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" >> {record}\nexit 0\n')
    shim.chmod(0o755)
    trainer = CustomTrainer(
        "def train():\n    return 1\n",
        packages_to_install=["numpy>=1", "x @ https://h/x.whl"],
        pip_index_urls=["https://h/simple"],
    )
    command = custom_trainer_command(trainer, _torch())
    env = {
        **os.environ,
        "PATH": f"{shim.parent}{os.pathsep}{os.environ['PATH']}",
        "KF_TRAINER_LAUNCHER": sys.executable,
        function.TERMINATION_LOG_ENV: str(tmp_path / "term"),
    }
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "kf-trainer: installed numpy>=1 x @ https://h/x.whl" in done.stdout
    calls = record.read_text().split("-m\n")
    install = next(c for c in calls if c.startswith("pip\ninstall"))
    assert install.splitlines()[-5:] == [
        "--index-url",
        "https://h/simple",
        "--",
        "numpy>=1",
        "x @ https://h/x.whl",
    ]


# --------------------------------------------------- credentials inside storage URIs

_CREDENTIAL_URIS = [
    ("DatasetInitializer", "https://alice:hunter2-pw@data.example.com/train.csv"),
    ("DatasetInitializer", "https://acct.blob.core.windows.net/c/d.parquet?sv=2024&sig=SIGVALUE"),
    ("ModelInitializer", "https://bucket.s3.amazonaws.com/m.bin?X-Amz-Signature=SIGVALUE"),
    ("ModelInitializer", "https://storage.googleapis.com/b/m?X-Goog-Credential=SIGVALUE"),
    ("S3DatasetInitializer", "s3://bucket/data?token=SIGVALUE"),
]


@pytest.mark.parametrize(("kind", "uri"), _CREDENTIAL_URIS)
def test_a_storage_uri_that_carries_a_credential_is_refused_without_quoting_it(
    kind: str, uri: str
) -> None:
    # The URI would land in the TrainJob's initializer spec, readable by anyone who can read
    # the job: refused before submission, and the message never repeats the secret.
    with pytest.raises(SpecError) as err:
        getattr(spec_module, kind)(storage_uri=uri)
    text = str(err.value)
    assert err.value.fields == [f"{kind}.storage_uri"]
    assert "secret_ref" in text
    assert "SIGVALUE" not in text
    assert "hunter2" not in text


def test_a_storage_uri_with_a_harmless_query_is_accepted() -> None:
    init = spec_module.DatasetInitializer(storage_uri="https://data.example.com/d.csv?version=3")
    assert init.storage_uri.endswith("version=3")


@pytest.mark.parametrize(
    ("value", "zero", "expected"),
    [
        (None, "refused", None),
        (90, "refused", 90.0),
        (timedelta(minutes=2), "refused", 120.0),
        (0, "allowed", 0.0),
        (0, "no limit", None),
        (float("inf"), "no limit", None),
    ],
)
def test_one_duration_rule_for_every_adapter(value: Any, zero: Any, expected: Any) -> None:
    # Airflow's arguments, KFP's inputs and the client's all read durations here.
    assert timeutil.seconds(value, "timeout", zero=zero) == expected


@pytest.mark.parametrize(
    ("value", "zero", "message"),
    [
        ("1h", "refused", r"timeout: a str is not a number of seconds \(got '1h'\)"),
        (True, "allowed", r"timeout: a bool is not a number of seconds"),
        (0, "refused", r"timeout: 0 seconds is not a duration\. Fix: .*timeout=None"),
        (-1, "allowed", r"timeout: -1 seconds is not a duration\. Fix: give 0 or more"),
        (-1, "no limit", r"timeout: -1 seconds is not a duration\. Fix: .*0 for no limit"),
        (float("nan"), "no limit", r"timeout: nan seconds is not a duration"),
        (float("inf"), "refused", r"timeout: inf seconds is not finite"),
        (float("-inf"), "no limit", r"timeout: -inf seconds is not a duration"),
    ],
)
def test_what_is_no_duration_is_refused_naming_the_field(
    value: Any, zero: Any, message: str
) -> None:
    with pytest.raises(SpecError, match=message):
        timeutil.seconds(value, "timeout", zero=zero)
    # The client's check (every argument at once, no timedelta: it uses the raw value).
    if zero == "refused":
        with pytest.raises(SpecError, match=message):
            checks.check_seconds(timeout=value, wait=timedelta(seconds=1))


@pytest.mark.parametrize(
    ("values", "message"),
    [
        # Each was silently dropped, or silently read as another backend, before.
        ({"backend": "slurm"}, r"backend is 'slurm'\. Fix: use 'kubernetes', 'local'"),
        ({"backend": "local", "watch_timeout": 5}, r"watch_timeout applies only to .*'kubernetes'"),
        ({"image": "img"}, r"image applies only to backend 'container'"),
        ({"backend": "local", "auto_remove": False}, r"auto_remove applies only to .*'container'"),
        ({"on_missing_resources": "fail"}, r"on_missing_resources applies only to .*'local'"),
        # An adapter's own names of the fields.
        ({"backend": "local", "token": "t"}, r"password \(bearer token\) applies only"),
        ({"watch_timeout": 1}, r"^watch_timeout: .*greater than or equal to 2"),
        ({"kubeconfig_content": "{nope"}, r"^kubeconfig: "),
    ],
)
def test_backend_fields_refuse_what_their_backend_does_not_use(
    values: dict[str, Any], message: str
) -> None:
    names = {"token": "password (bearer token)", "kubeconfig_content": "kubeconfig"}
    with pytest.raises(ValueError, match=message):
        config_from_fields(values, names)


def test_backend_fields_take_a_forms_defaults_for_any_backend() -> None:
    # A form sends every field: its defaults are no stray settings.
    form = {"watch_timeout": 60, "verify_ssl": True, "on_missing_resources": "warn"}
    assert isinstance(config_from_fields({**form, "backend": "local"}), LocalConfig)
    assert isinstance(config_from_fields(form), KubernetesConfig)
    flat = config_from_fields({"backend": "container", "image": "img", "container": {}})
    assert flat.image == "img"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("value", "said"),
    [(10**400, "is not finite"), (-(10**400), "is not a duration")],
    ids=["huge", "huge-negative"],
)
def test_a_duration_past_any_float_is_the_fields_error(value: int, said: str) -> None:
    # float(10**400) raises OverflowError: it must be the field's error, with the fix.
    with pytest.raises(SpecError, match=rf"timeout: .*{said}\. Fix: give a number"):
        timeutil.seconds(value, "timeout")


def test_a_duration_past_any_float_is_no_limit_where_zero_is_none() -> None:
    assert timeutil.seconds(10**400, "timeout_seconds", zero="no limit") is None
