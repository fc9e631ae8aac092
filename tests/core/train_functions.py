"""Training functions used by the tests, importable as ``core.train_functions:<name>``
(and defined in a real file, so their source can be captured)."""

from __future__ import annotations

import functools
from typing import Any


def train_linear(lr: float = 0.1, epochs: int = 3) -> dict[str, float]:
    """A tiny self-contained training function (no imports outside its body)."""
    import random

    rng = random.Random(0)
    w = 0.0
    for _ in range(epochs * 50):
        x = rng.uniform(-1, 1)
        y = 3.0 * x
        w -= lr * 2 * (w * x - y) * x
    return {"w": round(w, 3), "loss": round((3.0 - w) ** 2, 6)}


def shell_hostile() -> dict[str, Any]:
    """Text that a shell would expand if the program went through one unquoted."""
    text = "$HOME `echo hacked` $(echo also) \\n 'single' \"double\" EOM EOF"
    print(text)
    return {"text": text}


def _noop_decorator(**_: Any) -> Any:
    def wrap(func: Any) -> Any:
        @functools.wraps(func)
        def inner(*args: Any, **kwargs: Any) -> Any:
            return func(*args, **kwargs)

        return inner

    return wrap


@_noop_decorator(runtime="torch-distributed")
def decorated(x: int = 1) -> int:
    """Decorated like an orchestrator task: the decorator must not reach the pod."""
    return x * 2
