#!/usr/bin/env bash
# Build Strait's container image from Debian's packages and Strait's wheel, with nothing pulled
# from an image registry:
#   1. mmdebstrap makes a Debian bookworm root filesystem (python3, python3-venv, tini,
#      ca-certificates) and podman imports it as localhost/strait-base:bookworm (kept; made again
#      with --rebuild-base or when missing);
#   2. `pip wheel` builds Strait's wheel from this checkout;
#   3. podman builds deploy/image/Containerfile on that base (--pull=never), installing the wheel
#      and its dependencies from PyPI into /opt/strait.
#
# Usage: deploy/image/build.sh [--tag NAME] [--rebuild-base] [--save FILE.tar]
# Needs root (or a podman set up for rootless use), podman, mmdebstrap and access to Debian's
# package mirror and PyPI. Prints the image name on its last line.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
suite=bookworm
base="localhost/strait-base:$suite"
tag=""
save=""
rebuild_base=0
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) tag="$2"; shift 2 ;;
    --rebuild-base) rebuild_base=1; shift ;;
    --save) save="$2"; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

for tool in podman mmdebstrap runc; do
  command -v "$tool" >/dev/null || { echo "$tool is missing (Debian: apt-get install podman mmdebstrap runc)" >&2; exit 1; }
done
python="${PYTHON:-$repo/.venv/bin/python}"
[ -x "$python" ] || python=python3

work="$(mktemp -d "${TMPDIR:-/tmp}/strait-image.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# The same mirror as this machine's apt, so that a local mirror or proxy is used as apt uses it.
mirror="$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n 1)"
mirror="${mirror:-http://deb.debian.org/debian}"

if [ "$rebuild_base" = 1 ] || ! podman image exists "$base"; then
  echo "base: mmdebstrap $suite from $mirror" >&2
  nice -n 10 mmdebstrap --variant=essential --mode=root \
    --include=python3,python3-venv,ca-certificates,tini \
    --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/* "$1"/usr/share/doc/* "$1"/usr/share/man/* "$1"/usr/share/info/* "$1"/var/log/*' \
    "$suite" "$work/rootfs.tar" "$mirror"
  podman import --change 'CMD ["/bin/bash"]' "$work/rootfs.tar" "$base" >&2
  rm -f "$work/rootfs.tar"
fi

echo "wheel: pip wheel --no-deps $repo" >&2
"$python" -m pip wheel --quiet --no-deps --wheel-dir "$work/context" "$repo" >&2
wheel="$(cd "$work/context" && ls strait-*.whl)"
version="${wheel#strait-}"
version="${version%%-*}"
tag="${tag:-localhost/strait:$version}"

echo "image: $tag from $wheel" >&2
# runc rather than crun: crun refuses hosts with hybrid cgroups. Explicit limits within the
# builder's own: podman's defaults are higher, and raising them needs CAP_SYS_RESOURCE.
nofile="$(ulimit -Hn)"
[ "$nofile" = unlimited ] || [ "$nofile" -gt 65536 ] && nofile=65536
# The build's pip trusts what this machine's pip trusts (a local index or an intercepting proxy's
# CA): the CA file is mounted for the build only, never copied into the image.
pip_args=()
ca="${PIP_CERT:-$("$python" -m pip config get global.cert 2>/dev/null || true)}"
if [ -n "$ca" ] && [ -f "$ca" ]; then
  pip_args+=(--volume "$ca:/run/strait-build/ca.crt:ro" --build-arg PIP_CERT=/run/strait-build/ca.crt)
fi
if [ -n "${PIP_INDEX_URL:-}" ]; then
  pip_args+=(--build-arg "PIP_INDEX_URL=$PIP_INDEX_URL")
fi
previous="$(podman image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)"
nice -n 10 podman build --pull=never --network host --runtime runc "${pip_args[@]}" \
  --ulimit "nofile=$nofile:$nofile" --ulimit nproc=4096:4096 \
  --build-arg "BASE=$base" --build-arg "WHEEL=$wheel" \
  -f "$here/Containerfile" -t "$tag" "$work/context" >&2
# The image this tag named before, unless a container still uses it.
current="$(podman image inspect --format '{{.Id}}' "$tag")"
if [ -n "$previous" ] && [ "$previous" != "$current" ]; then
  podman rmi "$previous" >/dev/null 2>&1 || true
fi
if [ -n "$save" ]; then
  podman save --format oci-archive -o "$save" "$tag" >&2
fi
echo "$tag"
