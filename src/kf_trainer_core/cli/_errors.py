"""Exit codes of ``kf-trainer`` and the one-line messages its errors become.

Every error a user can cause ends the command with one line on stderr that says what
is wrong and how to fix it, and an exit code that scripts can tell apart. Tracebacks
are shown only with ``KF_TRAINER_DEBUG=1``.
"""

from __future__ import annotations

from enum import IntEnum

import click

from kf_trainer_core.base.errors import ClassifiedFailure, FailureClass


class Exit(IntEnum):
    """The exit codes (documented in docs/cli.md)."""

    OK = 0
    #: The job failed (``jobs wait``, ``run``) or did not reach the asked state.
    JOB_FAILED = 1
    #: Bad input: a usage error, an invalid spec, name, namespace or identity, a missing
    #: file or one that is not YAML/JSON. Nothing was submitted.
    BAD_INPUT = 2
    #: The job (or runtime) does not exist.
    NOT_FOUND = 3
    #: A job of that name exists with a different spec, or the API refused the object.
    CONFLICT = 4
    #: ``--timeout`` passed before the job finished.
    TIMEOUT = 5
    #: The backend could not be reached or refused the credentials.
    UNREACHABLE = 6
    #: An unexpected error (a bug: please report it with ``KF_TRAINER_DEBUG=1``'s output).
    INTERNAL = 10
    #: Interrupted (Ctrl-C).
    INTERRUPTED = 130


class CliError(click.ClickException):
    """An error the command reports in one line with its exit code."""

    def __init__(self, message: str, code: Exit = Exit.BAD_INPUT) -> None:
        super().__init__(message)
        self.code = int(code)


def classify(exc: BaseException, look: str = "kf-trainer jobs list") -> tuple[Exit, str]:
    """The exit code and message of an exception raised by the core. ``look`` is the
    command that lists the jobs where this invocation looked (named in not-found
    fixes, with the invocation's flags, so that it runs as printed)."""
    from kf_trainer_core import errors
    from kf_trainer_core.k8s.errors import ApiError

    if isinstance(exc, errors.TrainJobFailedError):
        return Exit.JOB_FAILED, str(exc)
    if isinstance(exc, errors.DeleteRefusedError):
        return Exit.UNREACHABLE, str(exc)  # says what became of the job, and the fix
    if isinstance(exc, errors.DeleteConflictError):
        return Exit.CONFLICT, str(exc)  # another controller kept writing the job
    if isinstance(exc, errors.WorkerUnreachableError):
        return Exit.UNREACHABLE, str(exc)  # names the worker and the fix
    if isinstance(exc, errors.TrainJobTimeoutError):
        if exc.lines is not None:
            # The wait said what holds the job up, the fix of its class and what it
            # leaves behind (with the commands that reach it).
            return Exit.TIMEOUT, str(exc)
        return Exit.TIMEOUT, _then(exc, "wait longer (--timeout); the job keeps running.")
    if isinstance(exc, errors.StateDirNotFoundError):
        return Exit.NOT_FOUND, str(exc)
    if isinstance(exc, errors.TrainJobDeletedError):
        return Exit.NOT_FOUND, str(exc)
    if isinstance(exc, (errors.RuntimeNotFoundError, errors.NamespaceNotFoundError)):
        return Exit.NOT_FOUND, str(exc)  # their message carries the fix that applies
    if isinstance(exc, errors.TrainJobNotFoundError):
        return Exit.NOT_FOUND, _then(exc, f"check the name and namespace with: {look}")
    if isinstance(exc, errors.BackendConfigRejectedError):
        return Exit.BAD_INPUT, str(exc)
    if isinstance(exc, (errors.SpecConflictError, errors.SubmitError)):
        return Exit.CONFLICT, str(exc)
    if isinstance(exc, ApiError):
        return _api_error(exc, look)
    if isinstance(exc, errors.ClusterConfigError) or type(exc).__name__ == "ConfigException":
        # The kubernetes client's kubeconfig errors (as the core reports them, secrets cut).
        what = exc.problems[0].problem if isinstance(exc, errors.ClusterConfigError) else str(exc)
        return Exit.UNREACHABLE, (
            _then(
                f"cannot use the kubeconfig: {what}",
                "check --kubeconfig and --context (or $KUBECONFIG), or use --backend local.",
            )
        )
    if isinstance(exc, (errors.SpecError, ValueError, TypeError)):
        # The core's bad-input errors are ValueErrors naming the field and the fix.
        return Exit.BAD_INPUT, str(exc)
    if isinstance(exc, ClassifiedFailure):
        # Every error of the core says what happened and the fix: one not named above
        # is no bug of the command. Its failure class picks the code.
        return _BY_CLASS.get(exc.failure_class, Exit.CONFLICT), str(exc)
    if isinstance(exc, errors.KFTrainerError):
        return Exit.CONFLICT, str(exc)
    if isinstance(exc, FileNotFoundError):
        return Exit.BAD_INPUT, _then(f"{exc.filename or exc}: no such file", "check the path.")
    if isinstance(exc, (ConnectionError, OSError)):
        return Exit.UNREACHABLE, f"cannot reach the backend: {exc}"
    return Exit.INTERNAL, (
        f"unexpected {type(exc).__name__}: {exc} "
        "(set KF_TRAINER_DEBUG=1 for the traceback and report it)"
    )


#: The exit code of a core error no rule of :func:`classify` names, by its failure class
#: (one without a class: :attr:`Exit.CONFLICT`, the cluster would not do it).
_BY_CLASS = {
    FailureClass.INFRASTRUCTURE: Exit.UNREACHABLE,
    FailureClass.CAPACITY: Exit.CONFLICT,
    FailureClass.CONFIGURATION: Exit.BAD_INPUT,
    FailureClass.USER_CODE: Exit.JOB_FAILED,
}


#: Where the command's user chose the cluster and credentials (the fixes of the API's
#: failures name them; the client's name its configuration).
_SETTINGS = "--kubeconfig/--context"


def _api_error(exc: object, look: str) -> tuple[Exit, str]:
    from kf_trainer_core.k8s.errors import ApiError

    assert isinstance(exc, ApiError)
    if exc.code == 404:
        return Exit.NOT_FOUND, _then(exc, f"check the name and namespace with: {look}")
    if exc.code in (409, 422, 400):
        return Exit.CONFLICT, str(exc)
    fix = exc.fix(_SETTINGS)
    if exc.unreachable and fix:
        return Exit.UNREACHABLE, _then(exc.detail, f"{fix[:-1]} (--backend local).")
    if fix:
        return Exit.UNREACHABLE, _then(exc.detail, fix)
    return Exit.UNREACHABLE, str(exc)


def _then(message: object, fix: str) -> str:
    """``message`` ended by one full stop, then ``Fix: fix``: the core's messages come
    with and without a full stop, and ``... (it is Running) Fix:`` reads as a typo."""
    text = str(message).rstrip()
    if not text.endswith((".", "!", "?")):
        text += "."
    return f"{text} Fix: {fix}"


def one_line(text: str) -> str:
    """``text`` with its first line kept whole and the rest joined (error messages)."""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return " ".join(lines)
