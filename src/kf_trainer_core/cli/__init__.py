"""``kf-trainer``: see, follow and manage TrainJobs from a terminal, and render or check
spec files.

    kf-trainer render spec.yaml                  # the TrainJob YAML a cluster would receive
    kf-trainer check spec.yaml                   # validate only
    kf-trainer run spec.yaml --identity nightly  # submit and follow to the end
    kf-trainer jobs list --status Running        # jobs of the namespace
    kf-trainer jobs logs NAME -f                 # follow node-0's log
    kf-trainer jobs wait NAME                    # progress bar; exit 0/1 by outcome
    kf-trainer jobs checkpoints clean IDENTITY   # remove an identity's checkpoints
    kf-trainer --backend local jobs list         # jobs run on this machine

Where jobs are comes from ``$KF_TRAINER_BACKEND`` (JSON) and ``--backend``,
``--namespace/-n``, ``--context``, ``--kubeconfig``, ``--state-dir``. Exit codes and
every command: docs/cli.md (online for the installed version: ``--help`` gives the
address).
"""

from __future__ import annotations

import os
import sys
import traceback

import click

from kf_trainer_core.base.project import docs_url, version
from kf_trainer_core.cli._errors import CliError, Exit, classify, one_line
from kf_trainer_core.cli._where import forget_last, last_hint, where_options
from kf_trainer_core.cli.checkpoints import checkpoints
from kf_trainer_core.cli.jobs import jobs
from kf_trainer_core.cli.rbac import rbac
from kf_trainer_core.cli.runtimes import runtimes
from kf_trainer_core.cli.specs import check, render, run

__all__ = ["Exit", "cli", "main"]


@click.group(
    "kf-trainer",
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    # The address of the docs of the installed version: an installed copy has no docs/.
    help="See, follow and manage Kubeflow Trainer TrainJobs (on a cluster or this machine), "
    f"and render or check spec files.\n\n\b\nDocs: {docs_url('cli.md')}",
)
@click.version_option(version(), "--version", prog_name="kf-trainer")
@where_options
def cli() -> None:
    """The ``kf-trainer`` command group (its help is the group's ``help=``)."""


jobs.add_command(checkpoints)
cli.add_command(jobs)
cli.add_command(runtimes)
cli.add_command(run)
cli.add_command(render)
cli.add_command(check)
cli.add_command(rbac)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``kf-trainer`` command: the exit code (see :class:`Exit`)."""
    debug = os.environ.get("KF_TRAINER_DEBUG", "") not in ("", "0")
    forget_last()
    try:
        cli.main(args=argv, prog_name="kf-trainer", standalone_mode=False)
    except click.exceptions.Exit as exc:  # --help, --version
        return int(exc.exit_code)
    except CliError as exc:
        # A Ctrl-C is the user's own act, not an error of theirs: said plainly.
        kind = "" if exc.code == Exit.INTERRUPTED else "error: "
        click.echo(f"kf-trainer: {kind}{one_line(exc.message)}", err=True)
        return exc.code
    except click.UsageError as exc:
        hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx else ""
        click.echo(f"kf-trainer: error: {one_line(exc.format_message())}{hint}", err=True)
        return int(Exit.BAD_INPUT)
    except click.ClickException as exc:
        click.echo(f"kf-trainer: error: {one_line(exc.format_message())}", err=True)
        return int(Exit.BAD_INPUT)
    except (click.Abort, KeyboardInterrupt):
        click.echo("kf-trainer: interrupted", err=True)
        return int(Exit.INTERRUPTED)
    except Exception as exc:
        code, message = classify(exc, last_hint("jobs", "list"))
        if debug:
            traceback.print_exc()
        if code is Exit.JOB_FAILED or (code is Exit.TIMEOUT and getattr(exc, "lines", None)):
            # A job's failure is an explanation (reason, step, exit code, log tail), and
            # so is a timeout that says what holds the job up, its fix and what is left
            # behind: keep their lines.
            click.echo(f"kf-trainer: {message}", err=True)
        else:
            click.echo(f"kf-trainer: error: {one_line(message)}", err=True)
        return int(code)
    return int(Exit.OK)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
