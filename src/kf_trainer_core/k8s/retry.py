"""When to try again, and after how long: one policy for every request and watch."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from kf_trainer_core.k8s.errors import ApiError


@dataclass
class RetryPolicy:
    """Exponential backoff with full jitter, honouring ``Retry-After``.

    ``attempts`` bounds retries of one request; watches reconnect without bound but with
    the same delays, reset after a healthy stream.
    """

    attempts: int = 6
    base: float = 0.2
    cap: float = 10.0
    #: Never wait longer than this for a server's Retry-After.
    max_retry_after: float = 60.0
    rng: random.Random = field(default_factory=random.Random, repr=False)

    def delay(self, attempt: int, error: ApiError | None = None) -> float:
        """Seconds to wait before try number ``attempt + 1`` (``attempt`` from 0)."""
        if error is not None and error.retry_after is not None:
            # The server said when: wait that long, with a little jitter so that many
            # clients told the same thing do not return in lockstep.
            return min(self.max_retry_after, error.retry_after) * (1 + 0.1 * self.rng.random())
        ceiling = min(self.cap, self.base * (2**attempt))
        return self.rng.uniform(ceiling / 2, ceiling)

    def should_retry(self, attempt: int, error: ApiError) -> bool:
        """Retry transient failures while attempts remain."""
        return error.retryable and attempt + 1 < self.attempts


DEFAULT_POLICY = RetryPolicy()
