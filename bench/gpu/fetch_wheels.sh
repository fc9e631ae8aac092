#!/usr/bin/env bash
# Download the wheels bench/gpu/run.py needs beyond the GPU machine's own Python (which has
# torch): pydantic and PyYAML with their dependencies, at uv.lock's versions, into the
# gitignored .whl/ of the repository root. Run it here (PyPI reachable); the GPU machine
# reaches nothing, so .whl/ travels with the working tree (the device tool's `carry`) and
# run.py unpacks it onto sys.path when pydantic is not importable.
#
#   bench/gpu/fetch_wheels.sh [PYTHON_VERSION]      # default 3.12 (the GPU machine's)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${1:-3.12}
mkdir -p .whl
python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
  --python-version "$PY" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl \
  pydantic==2.14.3 pydantic-core==2.50.4 annotated-types==0.8.0 typing-extensions==4.16.0 \
  typing-inspection==0.4.5 pyyaml==6.0.3
ls .whl
