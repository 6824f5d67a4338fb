#!/usr/bin/env bash
# dsmon's images built and run with Podman, on a machine with no image registry at hand:
#
#   scripts/containers.sh base     the Debian bookworm + Python 3.11 base, made with mmdebstrap
#                                  from Debian's packages and imported (kept, see below)
#   scripts/containers.sh build    base, then the Dockerfile's two images on that base:
#                                  localhost/dsmon:dev (every role) and
#                                  localhost/dsmon-collector:dev (the sidecar's)
#   scripts/containers.sh trainer  base, then the pod test's stand-in for a training image
#   scripts/containers.sh images   build and trainer, then the images named on stdout
#   scripts/containers.sh [run [PYTEST ARGS]]
#                                  the pods of deploy/k8s run as containers of those images
#                                  beside a real DeepSpeed job: tests/system/test_k8s_pod.py,
#                                  which reads the manifests and calls `images` itself
#
# Where Docker Hub is reachable none of this is needed: `docker build .` starts from the
# official python:3.11-slim-bookworm (docs/kubernetes.md). This base is the same distribution
# and Python, made from Debian's own packages instead.
#
# Podman as root. runc, cgroupfs and no default ulimits (scripts/containers.conf) because
# crun refuses hybrid cgroup v1/v2 hosts and the default nproc limit on some CI machines.
# Behind a TLS-intercepting proxy pip inside the build needs the machine's CA bundle: it is
# passed as the build secret "ca-bundle" (the Dockerfile says how), from $DSMON_CA_BUNDLE or
# else the system bundle. The build uses the host network (apt and pip fetch packages).
#
# The base is kept between runs: the rootfs tarball under $DSMON_CACHE (default
# ${XDG_CACHE_HOME:-~/.cache}/dsmon/containers), the image in Podman's storage. A changed
# recipe names a new tarball. DSMON_BASE_REFRESH=1 rebuilds it (Debian's security updates).
set -euo pipefail
cd "$(dirname "$0")/.."

export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/scripts/containers.conf}"
CACHE="${DSMON_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dsmon/containers}"
BUILD_IMAGE=localhost/dsmon-build:dev
FULL_IMAGE=localhost/dsmon:dev
COLLECTOR_IMAGE=localhost/dsmon-collector:dev
TRAINER_IMAGE=localhost/dsmon-test-trainer:dev
CA_BUNDLE="${DSMON_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"

log() { printf 'containers.sh: %s\n' "$*" >&2; }

need() {
  for tool in "$@"; do
    command -v "$tool" >/dev/null || { log "needs $tool (apt-get install podman buildah runc mmdebstrap)"; exit 2; }
  done
}

# rootfs TAR: Debian bookworm with Python 3.11, as a tarball.
rootfs() {
  # As Debian's images for Docker: /usr merged by the hook (no usrmerge, which pulls in
  # Perl), and these settings, which mmdebstrap keeps in the image's apt.conf.d and dpkg.cfg.d:
  # no package caches (without that, a layer's `apt-get install tini` weighs 82 MB), no
  # translations fetched, lists kept compressed; no documentation, manual pages or
  # translations installed.
  mmdebstrap --quiet --variant=minbase --format=tar \
    --include=python3.11,python3.11-venv,python-is-python3,ca-certificates,passwd \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr --aptopt='Acquire::Retries "3"' \
    --aptopt='Dir::Cache::pkgcache ""' --aptopt='Dir::Cache::srcpkgcache ""' \
    --aptopt='Acquire::Languages "none"' --aptopt='Acquire::GzipIndexes "true"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/lintian/*' \
    bookworm "$1"
}

# The base's tag names its recipe, so a changed recipe makes a new base, not a stale one.
BASE_IMAGE="localhost/dsmon-base:bookworm-py3.11-$(declare -f rootfs | sha1sum | cut -c1-8)"

base() {
  need podman mmdebstrap
  mkdir -p "$CACHE"
  if [ "${DSMON_BASE_REFRESH:-0}" != 1 ] && podman image exists "$BASE_IMAGE"; then
    return
  fi
  local tar="$CACHE/${BASE_IMAGE##*:}.tar" start=$SECONDS
  if [ "${DSMON_BASE_REFRESH:-0}" = 1 ] || [ ! -s "$tar" ]; then
    log "mmdebstrap bookworm -> $tar (its output in $CACHE/mmdebstrap.log)"
    rootfs "$tar.part" >"$CACHE/mmdebstrap.log" 2>&1 || { tail -n 30 "$CACHE/mmdebstrap.log" >&2; exit 1; }
    mv "$tar.part" "$tar"
    DSMON_BASE_REFRESH=0
  fi
  # What python:3.11-slim-bookworm's configuration holds and a bare rootfs lacks.
  podman import --quiet \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["python3"]' \
    "$tar" "$BASE_IMAGE" >/dev/null
  log "base $BASE_IMAGE in $((SECONDS - start)) s, $(size "$BASE_IMAGE")"
}

# build_one TARGET IMAGE: one stage of the Dockerfile, on the base, timed; its output in the
# cache folder, shown when it fails.
build_one() {
  local target=$1 image=$2 start=$SECONDS secret=() out="$CACHE/build-$1.log"
  [ -s "$CA_BUNDLE" ] && secret=(--secret "id=ca-bundle,src=$CA_BUNDLE")
  podman build --format docker --network host --layers --target "$target" \
    --build-arg "PYTHON_IMAGE=$BASE_IMAGE" "${secret[@]}" -t "$image" . >"$out" 2>&1 \
    || { tail -n 40 "$out" >&2; log "podman build --target $target failed (all of it: $out)"; exit 1; }
  log "$image (--target $target) in $((SECONDS - start)) s, $(size "$image")"
}

# The layers of earlier builds that no tag or newer layer uses any more (a changed checkout
# makes new ones each time), and only those of dsmon's images; then the bases of an earlier
# recipe, once nothing is built on them any more.
prune() {
  podman image prune --force --filter label=org.opencontainers.image.title=dsmon >/dev/null
  local old
  for old in $(podman images --format '{{.Repository}}:{{.Tag}}' localhost/dsmon-base); do
    if [ "$old" != "$BASE_IMAGE" ]; then podman rmi "$old" >/dev/null 2>&1 || true; fi
  done
  find "$CACHE" -maxdepth 1 -name 'bookworm-py3.11-*.tar' ! -name "${BASE_IMAGE##*:}.tar" -delete
}

size() {
  podman image inspect --format '{{.Size}}' "$1" | awk '{printf "%.0f MB", $1 / 1e6}'
}

build() {
  need podman
  base
  # The build stage (the wheels) is tagged as well, so that prune keeps it for the next
  # build. The full image then: its build makes the collector's layers too.
  build_one build "$BUILD_IMAGE"
  build_one runtime "$FULL_IMAGE"
  build_one collector "$COLLECTOR_IMAGE"
  prune
}

# The test's stand-in for a training image (tests/e2e/trainer.Containerfile).
trainer() {
  need podman
  base
  local start=$SECONDS out="$CACHE/build-trainer.log"
  podman build --format docker --network host --layers \
    --build-arg "BASE_IMAGE=$BASE_IMAGE" -f tests/e2e/trainer.Containerfile \
    -t "$TRAINER_IMAGE" tests/e2e >"$out" 2>&1 \
    || { tail -n 40 "$out" >&2; log "podman build of the trainer failed (all of it: $out)"; exit 1; }
  prune
  log "$TRAINER_IMAGE in $((SECONDS - start)) s"
}

# Every image the pod test runs, built (or found in the cache), then named on stdout.
images() {
  build
  trainer
  printf 'dsmon=%s\ndsmon-collector=%s\ntrainer=%s\n' "$FULL_IMAGE" "$COLLECTOR_IMAGE" "$TRAINER_IMAGE"
}

run() {
  local py=.venv/bin/python
  [ -x "$py" ] || py=python3
  "$py" -m pytest -p no:cacheprovider -n 0 -m slow tests/system/test_k8s_pod.py "$@"
}

case "${1:-run}" in
  base) base ;;
  build) build ;;
  trainer) trainer ;;
  images) images ;;
  run) shift || true; run "$@" ;;
  *) log "usage: scripts/containers.sh [base|build|trainer|images|run [PYTEST ARGS]]"; exit 2 ;;
esac
