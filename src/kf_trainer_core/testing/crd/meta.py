"""ObjectMeta validation (apimachinery's ``ValidateObjectMeta``, the parts custom
resources hit)."""

from __future__ import annotations

import re
from typing import Any, Final

from kf_trainer_core.testing.crd.errors import OMIT, FieldError
from kf_trainer_core.testing.crd.paths import PathT, fpath

_DNS1123_SUBDOMAIN_FMT: Final = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_DNS1123_SUBDOMAIN: Final = re.compile(rf"^{_DNS1123_SUBDOMAIN_FMT}\Z")
_QUALIFIED_NAME_FMT: Final = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QUALIFIED_NAME: Final = re.compile(rf"^{_QUALIFIED_NAME_FMT}\Z")
_LABEL_VALUE_FMT: Final = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"
_LABEL_VALUE: Final = re.compile(rf"^{_LABEL_VALUE_FMT}\Z")
_QUALIFIED_NAME_MSG: Final = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character"
)
_LABEL_VALUE_MSG: Final = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
    "or '.', and must start and end with an alphanumeric character"
)
_ANNOTATIONS_MAX_BYTES: Final = 256 * 1024


def _regex_error(message: str, fmt: str, *examples: str) -> str:
    shown = ",  or ".join(f"'{e}'" for e in examples)
    return f"{message} (e.g. {shown}, regex used for validation is '{fmt}')"


def _dns1123_subdomain_errors(value: str) -> list[str]:
    errors = []
    if len(value) > 253:
        errors.append("must be no more than 253 characters")
    if not _DNS1123_SUBDOMAIN.match(value):
        errors.append(
            _regex_error(
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                "characters, '-' or '.', and must start and end with an alphanumeric character",
                _DNS1123_SUBDOMAIN_FMT,
                "example.com",
            )
        )
    return errors


def _qualified_name_errors(value: str) -> list[str]:
    parts = value.split("/")
    errors: list[str] = []
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            errors.extend("prefix part " + e for e in _dns1123_subdomain_errors(prefix))
    else:
        return [
            "a qualified name "
            + _regex_error(_QUALIFIED_NAME_MSG, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errors.append("name part must be non-empty")
    elif len(name) > 63:
        errors.append("name part must be no more than 63 characters")
    if not _QUALIFIED_NAME.match(name):
        errors.append(
            "name part "
            + _regex_error(_QUALIFIED_NAME_MSG, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
        )
    return errors


def validate_object_meta(meta: Any, root: PathT = ()) -> list[FieldError]:
    """Name, labels and annotation checks the apiserver runs for every object."""
    path = fpath((*root, "metadata"))
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        return []  # a wrong type is reported by the schema walk
    errors: list[FieldError] = []
    name = meta.get("name")
    if not name and not meta.get("generateName"):
        errors.append(
            FieldError(f"{path}.name", "Required value", "name or generateName is required")
        )
    elif isinstance(name, str) and name:
        errors.extend(
            FieldError(f"{path}.name", "Invalid value", msg, name)
            for msg in _dns1123_subdomain_errors(name)
        )
    labels = meta.get("labels")
    if isinstance(labels, dict):
        for key in sorted(labels):
            value = labels[key]
            problems = [(msg, key) for msg in _qualified_name_errors(key)]
            if isinstance(value, str) and len(value) > 63:
                problems.append(("must be no more than 63 characters", value))
            if isinstance(value, str) and not _LABEL_VALUE.match(value):
                example = ("MyValue", "my_value", "12345")
                problems.append((_regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, *example), value))
            errors.extend(
                FieldError(f"{path}.labels", "Invalid value", msg, bad) for msg, bad in problems
            )
    annotations = meta.get("annotations")
    if isinstance(annotations, dict):
        size = 0
        for key in sorted(annotations):
            errors.extend(
                FieldError(f"{path}.annotations", "Invalid value", msg, key)
                for msg in _qualified_name_errors(key.lower())
            )
            size += len(key) + len(str(annotations[key] or ""))
        if size > _ANNOTATIONS_MAX_BYTES:
            errors.append(
                FieldError(
                    f"{path}.annotations",
                    "Too long",
                    f"may not be more than {_ANNOTATIONS_MAX_BYTES} bytes",
                    OMIT,
                )
            )
    return errors
