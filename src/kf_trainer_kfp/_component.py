"""Turning generated function source into KFP components. This is the one module of
the package that imports ``kfp`` at the top (and with it, through ``kfp.client``, a
Kubernetes library), so the factories import it only when called."""

from __future__ import annotations

import hashlib
import linecache
import re
import warnings
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from kfp import dsl
from kfp.dsl import Markdown, Metrics, Model, Output
from kfp.dsl.pipeline_channel import PipelineChannel
from kfp.dsl.python_component import PythonComponent

from kf_trainer_kfp.image import ComponentImage

Prepare = Callable[[dict[str, Any]], dict[str, Any]]

# KFP writes a reference to a pipeline channel inside a string (an f-string argument)
# as this placeholder; such a value is only known when the pipeline runs.
_CHANNEL_IN_TEXT = re.compile(r"\{\{channel:")

# The names the generated signatures use, as KFP's own component preamble provides
# them in the pod (``from kfp.dsl import *``, ``from typing import *``).
_SIGNATURE_NAMES = {
    "Output": Output,
    "Metrics": Metrics,
    "Model": Model,
    "Markdown": Markdown,
    "NamedTuple": NamedTuple,
}


def is_constant(value: Any) -> bool:
    """Whether an argument is known while the pipeline is defined (no channel in it)."""
    if isinstance(value, PipelineChannel):
        return False
    if isinstance(value, str):
        return not _CHANNEL_IN_TEXT.search(value)
    if isinstance(value, Mapping):
        return all(is_constant(k) and is_constant(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return all(is_constant(v) for v in value)
    return True


def in_loop() -> bool:
    """Whether a task being added now is inside a ``dsl.ParallelFor``."""
    from kfp.dsl import pipeline_context, tasks_group

    pipeline = pipeline_context.Pipeline.get_default_pipeline()
    groups = getattr(pipeline, "groups", None) or []
    return any(isinstance(g, tasks_group.ParallelFor) for g in groups)


class TrainJobComponent(PythonComponent):  # type: ignore[misc]
    """A KFP component made by ``kf_trainer_kfp``: an ordinary ``PythonComponent``
    (``kfp.kubernetes`` settings, ``set_retry``, ``after`` ... apply to its tasks) whose
    call also fills in the run's identity and checks constant arguments at once."""

    def __init__(self, component_spec: Any, python_func: Callable[..., Any], prepare: Prepare):
        super().__init__(component_spec=component_spec, python_func=python_func)
        self._kf_prepare = prepare

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return super().__call__(*args, **self._kf_prepare(dict(kwargs)))


def _exec_python(component: Any) -> None:
    """Let the component's command ``exec`` its way to Python, so that Python is the
    process the pod's runtime signals and waits for, not a shell that dies at once and
    takes the clean-up with it. Left as KFP wrote it if KFP writes it differently."""
    container = component.component_spec.implementation.container
    rewritten = []
    for part in container.command:
        if isinstance(part, str):
            part = part.replace("_KFP_RUNTIME=true python3 -m", "_KFP_RUNTIME=true exec python3 -m")
            part = part.replace('&& "$0" "$@"', '&& exec "$0" "$@"')
        rewritten.append(part)
    container.command = rewritten


def make_component(
    source: str, func_name: str, image: ComponentImage, prepare: Prepare
) -> TrainJobComponent:
    """A lightweight component from generated function source."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    filename = f"<kf-trainer-kfp:{func_name}:{digest}>"
    # KFP reads the function's source with inspect.getsource, which reads linecache:
    # registering the generated text there is how IPython makes cells inspectable too.
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict[str, Any] = {"__name__": "kf_trainer_kfp.generated", **_SIGNATURE_NAMES}
    # dont_inherit: this module's `from __future__ import annotations` would turn the
    # signature's annotations into strings, which KFP does not read.
    exec(compile(source, filename, "exec", dont_inherit=True), namespace)
    func = namespace[func_name]
    with warnings.catch_warnings():
        # The base image is always given; KFP's warning about its default is not ours.
        warnings.simplefilter("ignore", FutureWarning)
        component = dsl.component(
            func,
            base_image=image.base_image,
            packages_to_install=list(image.packages_to_install) or None,
            pip_index_urls=list(image.pip_index_urls) if image.pip_index_urls else None,
            install_kfp_package=image.install_kfp_package,
        )
    _exec_python(component)
    return TrainJobComponent(component.component_spec, component.python_func, prepare)
