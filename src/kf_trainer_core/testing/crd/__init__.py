"""Validate custom resources against a CustomResourceDefinition the way kube-apiserver does.

This package lets tests (and the Kubernetes-API test server in this package) treat a CRD
file as the single source of truth for what the API server accepts: OpenAPI defaulting,
pruning of unknown fields, structural-schema validation, ``x-kubernetes-list-type``
invariants and the CRD's ``x-kubernetes-validations`` CEL rules, with error messages
shaped like the apiserver's 422 answers.

The upstream CRDs are *data* read at run time from a folder outside the repository
(see :func:`find_upstream`); nothing from them is copied here.

Fidelity notes (why things are done the way they are):

* Error order follows ``customResourceStrategy.Validate``: ObjectMeta checks, then
  OpenAPI schema errors, then list-type errors, then CEL rules. As in the apiserver,
  CEL rules are skipped when a "blocking" error (wrong type, bad format, unsupported
  enum value, a required field missing) was found, and one extra error says so.
* Errors are printed as kube-apiserver 1.36 prints them: a CEL rule's error shows the
  value when it is a scalar (``Invalid value: "x/y"``, ``Invalid value: 0``) and none
  for an object or a list (``Invalid value: field is immutable``) or beside a
  messageExpression's message; other bad values that are not scalars are JSON
  (``Duplicate value: {"name":"A"}``, ``Invalid value: null``). Root-level errors have
  an empty field path, printed ``<nil>`` like a nil ``field.Path``, in the message and
  in the cause's ``field`` alike.
* On updates, validation ratcheting (on by default since Kubernetes 1.30) is applied:
  value errors and non-transition CEL rules are ignored for sub-trees that did not change.
* OpenAPI errors use kube-openapi's "``<path> in body ...``" details. Map entries
  (``additionalProperties``) are named ``a.b.key`` in OpenAPI errors but ``a.b[key]``
  in CEL and list-type errors, because the two apiserver code paths build paths
  differently.

CEL is evaluated with cel-python (``celpy``), imported lazily so that this package can be
imported where cel-python is not installed (only CRDs with rules need it).

Layout: :mod:`.errors` (field errors, apiserver messages), :mod:`.paths` (field paths),
:mod:`.cel` (the CEL runtime and compiled rules), :mod:`.schema` (schema nodes, JSON
equality, formats), :mod:`.meta` (ObjectMeta checks), :mod:`.validation` (the schema
walk), :mod:`.rules` (running CEL rules), :mod:`.defaulting` (defaults and pruning),
:mod:`.definition` (:class:`CRDSchema`, the entry points) and :mod:`.upstream`
(finding and loading the upstream CRDs).
"""

from __future__ import annotations

from kf_trainer_core.testing.crd.cel import CELCompileError
from kf_trainer_core.testing.crd.definition import CRDSchema
from kf_trainer_core.testing.crd.errors import (
    OMIT,
    FieldError,
    format_invalid,
    format_unknown_fields,
    invalid_status,
    unknown_fields_in_patch,
)
from kf_trainer_core.testing.crd.rules import evaluate_rule
from kf_trainer_core.testing.crd.upstream import UPSTREAM_ENV, find_upstream, load_upstream_crds

# kf_trainer_core.testing.kueue reads its CRD through the same cache.
from kf_trainer_core.testing.crd.upstream import _load_cached as _load_cached

__all__ = [
    "OMIT",
    "UPSTREAM_ENV",
    "CELCompileError",
    "CRDSchema",
    "FieldError",
    "evaluate_rule",
    "find_upstream",
    "format_invalid",
    "format_unknown_fields",
    "invalid_status",
    "load_upstream_crds",
    "unknown_fields_in_patch",
]
