#!/usr/bin/env bash
# CI: a Docker engine and the container backend's test image, on a fresh Debian machine.
#
#   .ci/container-setup.sh start   install docker.io + debootstrap if missing, start dockerd
#                                  (no default bridge: containers use the host network), build
#                                  the test image once; prints `KF_TRAINER_TEST_IMAGE=<tag>`
#   .ci/container-setup.sh stop    stop the dockerd this script started (if any)
#
# No registry is reachable here, so the image is built from Debian's packages
# (debootstrap, ~2 min) plus PyTorch's CPU wheel from this machine's pip configuration (a
# two-node gloo all-reduce runs in it). Its tag carries a hash of this script and of the
# pinned torch: a second run with the engine's data kept finds it and takes a second.
# Anything that fails leaves the tests to skip with the reason, never the CI run broken.
set -uo pipefail

DATA_ROOT=${KF_TRAINER_DOCKER_DATA_ROOT:-/var/lib/kf-trainer-docker}
PIDFILE=/run/kf-trainer-dockerd.pid
LOG=${TMPDIR:-/tmp}/kf-trainer-dockerd.log
IMAGE_REPO=kf-trainer-test
TORCH_SPEC=${KF_TRAINER_TEST_TORCH:-torch==2.13.0}

say() { echo "container-setup: $*" >&2; }

engine_up() { docker info >/dev/null 2>&1; }

start_engine() {
  if engine_up; then
    say "an engine already answers; using it"
    return 0
  fi
  if ! command -v dockerd >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; then
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
      say "no dockerd and no way to install it (needs root and apt-get)"
      return 1
    fi
    say "installing docker.io and debootstrap"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      docker.io debootstrap >/dev/null || { say "apt-get install failed"; return 1; }
  fi
  mkdir -p "$DATA_ROOT"
  # --bridge=none/--iptables=false: no docker0 and no NAT rules; containers run with
  # network_mode=host and talk over 127.0.0.1 only.
  dockerd --bridge=none --iptables=false --ip6tables=false --data-root "$DATA_ROOT" \
    --pidfile "$PIDFILE" >"$LOG" 2>&1 &
  for _ in $(seq 1 60); do
    engine_up && { say "dockerd started (log: $LOG)"; return 0; }
    sleep 0.5
  done
  say "dockerd did not start; see $LOG"
  tail -5 "$LOG" >&2
  return 1
}

build_image() {
  local wheels tag hash root
  # The tag hashes this script and the pinned torch: a cached image is found without
  # downloading anything.
  hash=$( { cat "$0"; echo "$TORCH_SPEC"; } | sha256sum | cut -c1-12)
  tag="$IMAGE_REPO:$hash"
  if docker image inspect "$tag" >/dev/null 2>&1; then
    say "image $tag is cached"
    echo "$tag"
    return 0
  fi
  wheels=$(mktemp -d)
  # The wheels pip would install for torch on this machine (its find-links / index).
  if ! python3 -m pip download --quiet --disable-pip-version-check --only-binary=:all: \
      --python-version 3.11 --platform manylinux_2_28_x86_64 -d "$wheels" "$TORCH_SPEC" numpy \
      >/dev/null 2>&1; then
    say "$TORCH_SPEC could not be downloaded: the image gets no torch (gloo test skips)"
    rm -rf "$wheels"; wheels=""
  fi
  root=$(mktemp -d)
  say "building $tag (debootstrap bookworm + python3${wheels:+ + torch})"
  if ! debootstrap --variant=minbase --include=python3 bookworm "$root" \
      >"$root.debootstrap.log" 2>&1; then
    say "debootstrap failed; see $root.debootstrap.log"
    return 1
  fi
  ln -sf python3 "$root/usr/bin/python"
  if [ -n "$wheels" ]; then
    python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-index --no-deps \
      --target "$root/usr/local/lib/python3.11/dist-packages" "$wheels"/*.whl \
      || { say "installing torch into the image failed"; return 1; }
    # --target leaves console scripts under the target; the cluster images have torchrun
    # on PATH, so write it where the image's python finds it.
    mv "$root/usr/local/lib/python3.11/dist-packages/bin/"* "$root/usr/local/bin/" 2>/dev/null
    sed -i '1s|^#!.*|#!/usr/bin/python3|' "$root/usr/local/bin/"* 2>/dev/null
    rm -rf "$wheels"
  fi
  rm -rf "$root/var/cache/apt/archives/"*.deb "$root/var/lib/apt/lists/"*
  tar -C "$root" -c . | docker import - "$tag" >/dev/null || { say "docker import failed"; return 1; }
  rm -rf "$root" "$root.debootstrap.log"
  say "built $tag"
  echo "$tag"
}

case "${1:-start}" in
  start)
    start_engine || exit 0
    if tag=$(build_image); then
      echo "KF_TRAINER_TEST_IMAGE=$tag"
    fi
    ;;
  stop)
    if [ -f "$PIDFILE" ]; then
      pid=$(cat "$PIDFILE")
      kill "$pid" 2>/dev/null
      for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
      say "dockerd stopped"
    fi
    ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
