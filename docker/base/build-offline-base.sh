#!/usr/bin/env bash
# Build a Debian bookworm base image without any image registry: debootstrap a minimal root
# filesystem from the Debian mirror, then `docker import` it. Idempotent: does nothing when the
# tag already exists (FORCE=1 rebuilds).
#
#   docker/base/build-offline-base.sh [TAG]      default TAG: dpo-bench/base:bookworm
#   env: DOCKER (default /usr/bin/docker), DEBIAN_MIRROR (default http://deb.debian.org/debian), FORCE=1
set -euo pipefail

TAG="${1:-dpo-bench/base:bookworm}"
DOCKER="${DOCKER:-/usr/bin/docker}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

if [[ -z "${FORCE:-}" ]] && "$DOCKER" image inspect "$TAG" >/dev/null 2>&1; then
  echo "base image $TAG already present"
  exit 0
fi
command -v debootstrap >/dev/null || { echo "error: debootstrap is missing (apt-get install debootstrap)" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || { echo "error: debootstrap needs root" >&2; exit 1; }

root="$(mktemp -d /tmp/dpo-bench-base.XXXXXX)"
trap 'rm -rf "$root"' EXIT
echo "--- debootstrap --variant=minbase bookworm ($MIRROR)"
debootstrap --variant=minbase bookworm "$root" "$MIRROR" >"$root.log" 2>&1 || { tail -20 "$root.log" >&2; exit 1; }
rm -f "$root.log"
# Same apt sources as the official debian:bookworm image (security updates included).
cat >"$root/etc/apt/sources.list" <<SOURCES
deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
SOURCES
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | "$DOCKER" import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["bash"]' - "$TAG"
"$DOCKER" image inspect --format '{{.Id}} {{.Size}}' "$TAG"
