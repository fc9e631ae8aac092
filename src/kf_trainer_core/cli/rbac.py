"""``kf-trainer rbac``: the Role and ClusterRole the suite needs, as YAML to apply."""

from __future__ import annotations

import click
import yaml

from kf_trainer_core.k8s import rbac as rights


@click.command("rbac")
@click.option(
    "--namespace",
    "-n",
    default="default",
    show_default=True,
    help="The namespace whose jobs the identity runs (the Role's).",
)
@click.option(
    "--profile",
    type=click.Choice(sorted(rights.PROFILES)),
    default="runner",
    show_default=True,
    help="runner: everything the suite does; viewer: reading only; worker: what it reads "
    "on a MultiKueue worker cluster (apply it there).",
)
@click.option("--name", default="kf-trainer-suite", show_default=True, help="The roles' name.")
def rbac(namespace: str, profile: str, name: str) -> None:
    """The Role and ClusterRole the identity the client runs as needs (bind them with
    a RoleBinding and a ClusterRoleBinding): `kf-trainer rbac -n team-a | kubectl apply -f -`."""
    docs = rights.manifests(namespace, profile, name)
    click.echo(yaml.safe_dump_all(docs, sort_keys=False), nl=False)
