"""Benchmarks of kf-trainer-suite against the Kubeflow SDK: completion latency, API
requests per job, the scale of waiting, submit throughput, import cost and the local
backend. Run ``uv run python -m bench`` (see :mod:`bench.__main__`); the results go to
``BENCHMARKS.md``, ``bench/plots/`` and ``bench/results.json``."""
