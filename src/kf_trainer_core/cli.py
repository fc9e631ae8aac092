"""``kf-trainer``: render and check TrainJob specs from the command line.

kf-trainer render spec.yaml            # the TrainJob YAML the cluster would receive
kf-trainer render spec.json --name x   # with a chosen name
kf-trainer check spec.yaml             # validate only; exit 1 with the problems
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from kf_trainer_core.errors import SpecError


def _load_spec(path: str) -> Any:
    from kf_trainer_core.spec import TrainJobSpec

    text = sys.stdin.read() if path == "-" else Path(path).read_text()
    data = json.loads(text) if text.lstrip().startswith("{") else yaml.safe_load(text)
    return TrainJobSpec.parse(data)


def _render(args: argparse.Namespace) -> int:
    from kf_trainer_core.builder import build_trainjob

    built = build_trainjob(
        _load_spec(args.spec), namespace=args.namespace, name=args.name, identity=args.identity
    )
    for warning in built.warnings:
        print(f"# warning: {warning}", file=sys.stderr)
    sys.stdout.write(built.yaml())
    return 0


def _check(args: argparse.Namespace) -> int:
    from kf_trainer_core.builder import build_trainjob

    built = build_trainjob(_load_spec(args.spec), name=args.name)
    print(f"ok: {built.name} ({built.runtime.name}, spec hash {built.spec_hash[:12]})")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``kf-trainer`` command."""
    parser = argparse.ArgumentParser(prog="kf-trainer", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    render = sub.add_parser("render", help="print the TrainJob YAML for a spec file")
    render.add_argument("spec", help="spec file (JSON or YAML), '-' for stdin")
    render.add_argument("--namespace", "-n")
    render.add_argument("--name")
    render.add_argument("--identity", help="orchestrator identity, e.g. dag/task/run")
    render.set_defaults(func=_render)

    check = sub.add_parser("check", help="validate a spec file")
    check.add_argument("spec")
    check.add_argument("--name")
    check.set_defaults(func=_check)

    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except SpecError as exc:
        print(exc, file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
