"""The GPU benchmark: ``bench/gpu/run.py`` on a machine with an NVIDIA GPU (one short
script, against bare torchrun in the same run), ``python -m bench.gpu.record`` to put
its figures in ``BENCHMARKS.md``."""
