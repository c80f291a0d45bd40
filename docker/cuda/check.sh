#!/usr/bin/env bash
# Build the cuda image and check it on a machine without a GPU (`make check-cuda-image`). Run it before every
# change to docker/cuda/requirements.lock or docker/cuda/Dockerfile (it is not part of CI: docs/docker.md).
#   1. make images FLAVOR=cuda (and FLAVOR=cpu, the reference for step 3), passing OFFLINE_BASE / EXTRA_CA_CERTS
#   2. docker/cuda/check_image.py in the image: lock, torch CUDA build, bitsandbytes, nvcc, DeepSpeed's builders,
#      the prebuilt DeepSpeedCPUAdam, a real nvcc build of its FusedAdam op for CUDA_ARCH (default 8.6, the A10 of
#      HW=2xA10), NVML
#   3. a CPU cell in the cuda image vs the cpu image: same status and token count (tests/integration)
set -euo pipefail
cd "$(dirname "$0")/../.."

DOCKER=/usr/bin/docker
PY=.venv/bin/python
"$DOCKER" info >/dev/null 2>&1 || { echo "error: no docker engine answers \`$DOCKER info\` (start dockerd)" >&2; exit 1; }

started=$SECONDS
for flavor in cuda cpu; do
  echo "--- make images FLAVOR=$flavor OFFLINE_BASE=${OFFLINE_BASE:-} EXTRA_CA_CERTS=${EXTRA_CA_CERTS:-}"
  log="/tmp/dpo-bench-image-$flavor.log"
  make images FLAVOR="$flavor" OFFLINE_BASE="${OFFLINE_BASE:-}" EXTRA_CA_CERTS="${EXTRA_CA_CERTS:-}" >"$log" 2>&1 \
    || { tail -40 "$log"; echo "error: building the $flavor image failed (log: $log)" >&2; exit 1; }
  tail -1 "$log"
  if [[ $flavor == cuda ]]; then built=$((SECONDS - started)); fi
done
tag="$("$PY" -c 'from bench.executors.docker_images import image_tag; print(image_tag("cuda"))')"
size="$("$DOCKER" image inspect --format '{{.Size}}' "$tag" | awk '{printf "%.2f GB", $1/1e9}')"
echo "cuda image $tag: build $built s, $size"

echo "--- docker/cuda/check_image.py --build-op ${CUDA_ARCH:-8.6} (no GPU)"
checked=$SECONDS
"$DOCKER" run --rm --network none --user "$(id -u):$(id -g)" \
  --mount "type=bind,source=$PWD/docker/cuda/check_image.py,target=/opt/dpo-bench/check_image.py,readonly" \
  "$tag" python /opt/dpo-bench/check_image.py --build-op "${CUDA_ARCH:-8.6}"
echo "image check: $((SECONDS - checked)) s"

echo "--- a CPU cell in the cuda image vs the cpu image"
cell=$SECONDS
"$PY" -m pytest tests/integration/test_docker_cells.py -m cuda_image -v -s
echo "cell comparison: $((SECONDS - cell)) s; check-cuda-image in all: $((SECONDS - started)) s"
