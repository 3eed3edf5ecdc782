#!/usr/bin/env bash
# Registry-free base images for machines that reach Debian's mirror and PyPI but no container registry
# (CI, air-gapped builders): podman settings in a private containers.conf, then
#   localhost/ml8s-base/python:3.11-bookworm  debootstrap --variant=minbase bookworm + Debian's python3.11
#                                             (stands in for python:3.11.x-slim-bookworm and the CUDA base)
#   localhost/ml8s-base/uv:<version>          /uv from uv's own PyPI wheel (stands in for ghcr.io/astral-sh/uv)
# Idempotent: an image already there is kept. Prints the lines to source for `make images CONTAINER=podman`.
#
# Usage: images/base-images.sh [--conf-only]
# Environment: PODMAN_CONF_DIR (default .podman/ in the repository, git-ignored), DEBIAN_MIRROR (default: the
# Debian mirror apt uses here), SUITE (bookworm), UV_VERSION (default: the version of Dockerfile.train's UV_IMAGE).
set -euo pipefail
cd "$(dirname "$0")/.."

die() {
    echo "base-images: ERROR: $*" >&2
    exit 1
}

# Retries a command that goes to the network (mirror or PyPI hiccups), 3 tries, 10 s apart.
retry() {
    local n
    for n in 1 2 3; do
        "$@" && return 0
        echo "base-images: try $n of 3 failed: $*" >&2
        [ "$n" -lt 3 ] && sleep 10
    done
    return 1
}

SUITE=${SUITE:-bookworm}
PODMAN_CONF_DIR=${PODMAN_CONF_DIR:-$PWD/.podman}
PYTHON_BASE=${PYTHON_BASE:-localhost/ml8s-base/python:3.11-$SUITE}
UV_VERSION=${UV_VERSION:-$(sed -n 's|^ARG UV_IMAGE=.*uv:\([0-9.]*\)$|\1|p' images/Dockerfile.train)}
[ -n "$UV_VERSION" ] || die "no UV_VERSION given and no 'ARG UV_IMAGE=...uv:<version>' in images/Dockerfile.train"
UV_BASE=${UV_BASE:-localhost/ml8s-base/uv:$UV_VERSION}

# The machine's limits podman trips over, in a private file (CONTAINERS_CONF), never /etc/containers:
# the default nofile/nproc ulimits exceed what this kernel grants a container, and crun refuses the
# hybrid cgroup setup that runc accepts.
mkdir -p "$PODMAN_CONF_DIR"
cat >"$PODMAN_CONF_DIR/containers.conf" <<'EOF'
# Written by images/base-images.sh; used through CONTAINERS_CONF only.
[containers]
default_ulimits = ["nofile=20000", "nproc=32768"]

[engine]
runtime = "runc"
EOF
export CONTAINERS_CONF="$PODMAN_CONF_DIR/containers.conf"
echo "base-images: podman settings in $CONTAINERS_CONF"
[ "${1:-}" = "--conf-only" ] && exit 0

command -v podman >/dev/null || die "podman is not installed (apt-get install podman)"

# The first Debian (not -security) URI of apt's sources, deb822 or one-line format.
debian_mirror() {
    local f
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        sed -n -e 's|^URIs:[[:space:]]*\([^[:space:]]*/debian\)/\?$|\1|p' \
            -e 's|^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]*/debian\)/\?[[:space:]].*|\2|p' "$f"
    done | head -n 1
}

if podman image exists "$PYTHON_BASE"; then
    echo "base-images: $PYTHON_BASE already there"
else
    command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"
    mirror=${DEBIAN_MIRROR:-$(debian_mirror)}
    mirror=${mirror:-http://deb.debian.org/debian}
    rootfs=$(mktemp -d /var/tmp/ml8s-rootfs.XXXXXX)
    trap 'rm -rf "$rootfs" "$rootfs.log"' EXIT
    echo "base-images: debootstrap $SUITE from $mirror"
    start=$SECONDS
    # python3.11-venv brings ensurepip (the images make a venv); debootstrap does not resolve the virtual
    # python3.11-distutils it needs, so its provider is named. ca-certificates as in python's slim image.
    packages=python3.11,python3.11-venv,python3-distutils,ca-certificates
    # shellcheck disable=SC2016  # expanded by the inner bash, from its arguments
    retry bash -c 'rm -rf "${1:?}"/* && debootstrap --variant=minbase --include="$4" "$2" "$1" "$3" >"$1.log" 2>&1 ||
        { tail -n 5 "$1.log"; grep -h -A3 -i "error" "$1/debootstrap/debootstrap.log" | tail -n 20; exit 1; } >&2' \
        _ "$rootfs" "$SUITE" "$mirror" "$packages" ||
        die "debootstrap of $SUITE from $mirror failed 3 times (see the log lines above)"
    # Nothing of this machine goes in: no apt lists or caches, no resolv.conf/hostname of the build host.
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/* "$rootfs"/var/log/* "$rootfs"/tmp/* \
        "$rootfs"/etc/resolv.conf "$rootfs"/etc/hostname
    tar --numeric-owner -C "$rootfs" -c . | podman import --quiet \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]' - "$PYTHON_BASE" >/dev/null
    rm -rf "$rootfs" "$rootfs.log"
    trap - EXIT
    echo "base-images: $PYTHON_BASE imported in $((SECONDS - start))s"
fi

if podman image exists "$UV_BASE"; then
    echo "base-images: $UV_BASE already there"
else
    wheels=$(mktemp -d /var/tmp/ml8s-uv.XXXXXX)
    trap 'rm -rf "$wheels"' EXIT
    retry python3 -m pip download --quiet --no-deps --only-binary :all: --dest "$wheels" "uv==$UV_VERSION" ||
        die "could not download uv==$UV_VERSION from PyPI"
    python3 - "$wheels" <<'EOF'
import glob, os, sys, zipfile
wheel = glob.glob(os.path.join(sys.argv[1], "uv-*.whl"))[0]
with zipfile.ZipFile(wheel) as z:
    member = next(n for n in z.namelist() if n.endswith(".data/scripts/uv"))
    with open(os.path.join(sys.argv[1], "uv"), "wb") as f:
        f.write(z.read(member))
os.chmod(os.path.join(sys.argv[1], "uv"), 0o755)
EOF
    tar --numeric-owner --owner=0 --group=0 -C "$wheels" -c uv | podman import --quiet - "$UV_BASE" >/dev/null
    rm -rf "$wheels"
    trap - EXIT
    echo "base-images: $UV_BASE imported"
fi

echo "export CONTAINERS_CONF=$CONTAINERS_CONF"
