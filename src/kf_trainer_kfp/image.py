"""Where a component's own code runs: the image of the pod that launches and watches
the TrainJob (not the image of the training pods, which the spec and runtime decide).

That pod needs ``kf-trainer-suite`` (and ``kfp``, which KFP installs itself, without its
dependencies, as for any lightweight component). Three ways to provide it:

- the default: a plain Python image that installs ``kf-trainer-suite`` at start
  (the same version as the one compiling the pipeline);
- :meth:`ComponentImage.prebuilt`: an image with the suite already installed
  (faster starts, no index access from the cluster)::

      FROM python:3.11-slim
      RUN pip install kf-trainer-suite kfp==2.17.0

- :meth:`ComponentImage.current_environment`: for ``kfp.local.SubprocessRunner(
  use_venv=False)``, which runs components with this very interpreter, where
  everything is installed and ``pip`` may be absent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import metadata

from kf_trainer_core.errors import FieldProblem, SpecError

DISTRIBUTION = "kf-trainer-suite"
DEFAULT_BASE_IMAGE = "python:3.11"


def _split(problem: str) -> tuple[str, str]:
    from kf_trainer_core.tasks import checks

    text, _, how = problem.partition(checks.FIX)
    return text, how


def _pinned() -> str:
    # The pod must run the code that wrote the component: pin the compiling version.
    try:
        return f"{DISTRIBUTION}=={metadata.version(DISTRIBUTION)}"
    except metadata.PackageNotFoundError:
        return DISTRIBUTION


@dataclass(frozen=True)
class ComponentImage:
    """The image and installs of a component's pod (``@dsl.component``'s
    ``base_image``, ``packages_to_install``, ``pip_index_urls`` and
    ``install_kfp_package``)."""

    base_image: str = DEFAULT_BASE_IMAGE
    packages_to_install: tuple[str, ...] = field(default_factory=lambda: (_pinned(),))
    pip_index_urls: tuple[str, ...] | None = None
    install_kfp_package: bool = True

    def __post_init__(self) -> None:
        # KFP installs these with pip in the launcher pod: only requirements and
        # http(s) index URLs, as for a trainer's packages_to_install. The checks load
        # the core's pydantic helpers: here, not when the module is imported.
        from kf_trainer_core.tasks import checks

        problems = [
            FieldProblem(f"packages_to_install[{i}]", *_split(p))
            for i, package in enumerate(self.packages_to_install)
            for p in [checks.requirement_problem(package)]
            if p
        ]
        problems += [
            FieldProblem(f"pip_index_urls[{i}]", *_split(p))
            for i, url in enumerate(self.pip_index_urls or ())
            for p in [checks.index_url_problem(url)]
            if p
        ]
        if problems:
            raise SpecError(problems, root="ComponentImage")

    @classmethod
    def prebuilt(cls, image: str) -> ComponentImage:
        """An image that already holds ``kf-trainer-suite`` and ``kfp``: nothing is
        installed when the pod starts."""
        return cls(base_image=image, packages_to_install=(), install_kfp_package=False)

    @classmethod
    def current_environment(cls) -> ComponentImage:
        """Run with the interpreter that compiles (``kfp.local.SubprocessRunner(
        use_venv=False)``): nothing is installed."""
        return cls(packages_to_install=(), install_kfp_package=False)
