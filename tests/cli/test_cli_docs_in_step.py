"""docs/cli.md and the ``kf-trainer`` command stay in step (issue 35, item 2): the page
documented ``runtimes list --kind``, which did not exist. Walking Click's command tree:
every documented command exists, with the arguments and options the page gives it, and
every command and option of the tree is documented — in its row of the commands table,
in the "Where" table (the backend flags every command takes), or in the sentence that
lists the reading commands (``-o``/``--output``)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from kf_trainer_core.cli import cli

PAGE = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
_SPAN = re.compile(r"`([^`\n]+)`")


def _leaves(
    group: click.Command, path: tuple[str, ...] = ()
) -> Iterator[tuple[str, click.Command]]:
    if isinstance(group, click.Group):
        for name, sub in group.commands.items():
            yield from _leaves(sub, (*path, name))
    else:
        yield " ".join(path), group


def _flags(spans: list[str]) -> set[str]:
    """The option names in code spans: ``--for Complete|Running``, ``-l/--selector``."""
    found = set()
    for span in spans:
        head = span.split()[0] if span.split() else ""
        for part in head.split("/"):
            if part.startswith("-"):
                found.add(part)
    return found


def _section(text: str, title: str) -> str:
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _table_rows(section: str) -> list[list[str]]:
    rows = []
    for line in section.splitlines():
        if line.startswith("| ") and not line.startswith("| ---"):
            rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]])
    return rows[1:]  # without the header


class Page:
    """What docs/cli.md documents."""

    def __init__(self, text: str) -> None:
        #: command path -> (its arguments as written, the options of its row)
        self.commands: dict[str, tuple[list[str], set[str]]] = {}
        for cells in _table_rows(_section(text, "Commands")):
            options = _flags(_SPAN.findall(cells[2]))
            for span in _SPAN.findall(cells[0]):
                words = span.split()
                if words[0].startswith("-"):
                    self.commands[words[0]] = ([], options)  # --version
                    continue
                path = [w for w in words if not w.isupper() and not w.endswith("…")]
                arguments = [w.rstrip("…") for w in words[len(path) :]]
                self.commands[" ".join(path)] = (arguments, options)
        where = _section(text, "Where: one configuration")
        self.where = {f for row in _table_rows(where) for f in _flags(_SPAN.findall(row[0]))}
        reading = re.search(r"Reading commands \((.*?)\) take `-o", text, re.DOTALL)
        assert reading is not None, "the sentence on the reading commands' -o is gone"
        self.reading = set(_SPAN.findall(reading.group(1)))


@pytest.fixture(scope="module")
def page() -> Page:
    return Page(PAGE.read_text(encoding="utf-8"))


def _options(command: click.Command) -> set[str]:
    return {
        name
        for p in command.params
        if isinstance(p, click.Option)
        for name in (*p.opts, *p.secondary_opts)
    }


def _arguments(command: click.Command) -> list[str]:
    return [p.human_readable_name for p in command.params if isinstance(p, click.Argument)]


TREE = dict(_leaves(cli))


def test_the_page_parses_into_the_commands_it_documents(page: Page) -> None:
    assert "jobs list" in page.commands
    assert "jobs checkpoints where" in page.commands
    assert {"--backend", "--namespace", "-n", "--kubeconfig", "--state-dir"} <= page.where
    assert "jobs list" in page.reading


def test_every_documented_command_exists_with_its_arguments(page: Page) -> None:
    for path, (arguments, _) in page.commands.items():
        if path == "--version":
            assert "--version" in _options(cli)
            continue
        assert path in TREE, f"docs/cli.md documents `{path}`, which kf-trainer does not have"
        assert [a.rstrip("S") for a in _arguments(TREE[path])] == [
            a.rstrip("S") for a in arguments
        ], path


def test_every_documented_option_exists(page: Page) -> None:
    wrong = {
        path: sorted(options - _options(TREE[path]) - {"-h", "--help"})
        for path, (_, options) in page.commands.items()
        if path in TREE and options - _options(TREE[path]) - {"-h", "--help"}
    }
    assert not wrong, f"docs/cli.md documents options these commands lack: {wrong}"
    assert page.where <= _options(cli), "the Where table names a flag kf-trainer lacks"


def test_every_command_and_option_is_documented(page: Page) -> None:
    undocumented: dict[str, list[str]] = {}
    for path, command in TREE.items():
        if path not in page.commands:
            undocumented[path] = ["(the command)"]
            continue
        _, options = page.commands[path]
        known = options | page.where | {"--help", "-h"}
        if path in page.reading:
            known |= {"-o", "--output"}
        missing = sorted(_options(command) - known)
        if missing:
            undocumented[path] = missing
    assert not undocumented, f"document these in docs/cli.md: {undocumented}"


def test_the_help_points_at_docs_an_installed_user_can_reach() -> None:
    from kf_trainer_core.base.project import docs_url

    assert cli.help is not None
    assert "Docs: docs/cli.md" not in cli.help
    assert docs_url("cli.md") in cli.help
    assert docs_url("cli.md").startswith("https://")
