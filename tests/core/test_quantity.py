"""The suite's quantity parser reads what ``kubernetes.utils.parse_quantity`` reads."""

from __future__ import annotations

from decimal import Decimal

import pytest
from kubernetes.utils import parse_quantity as reference

from kf_trainer_core.k8s.quantity import parse_quantity

SAMPLES = ["4", "500m", "16Gi", "1e3", "7E+2", "3e-2", "2E", "1Ei", "0.5Ki", ".5", "+1", "-2k"]


@pytest.mark.parametrize("text", SAMPLES)
def test_quantities_read_as_kubernetes_reads_them(text: str) -> None:
    assert parse_quantity(text) == reference(text)


def test_numbers_pass_through() -> None:
    assert parse_quantity(8) == Decimal(8)
    assert parse_quantity(0.25) == Decimal("0.25")


@pytest.mark.parametrize(
    "text",
    # Past Decimal's range: its exponent (InvalidOperation), or the result (Overflow,
    # which no reader catching ValueError expected).
    ["", "abc", "1Z", "1.2.3", "Gi", "1 Gi", "1e99999999999", "1e1000000", "9" * 30 + "e999990"],
)
def test_what_is_not_a_quantity_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError, match=r"quantity|range"):
        parse_quantity(text)


@pytest.mark.parametrize("text", ["1e999999", "1e1000000"])
def test_the_local_backend_counts_no_gpus_past_any_range(text: str) -> None:
    # float() of 1e999999 is inf, and int(inf) raised OverflowError where a count of
    # GPUs was read; 1e1000000 raised decimal.Overflow.
    from kf_trainer_core.backends.local import gpus, machine

    assert gpus.requested({"limits": {gpus.GPU_RESOURCE: text}}) is None
    with pytest.raises(ValueError, match="range"):
        machine.quantity(text)
