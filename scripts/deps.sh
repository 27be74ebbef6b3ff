#!/usr/bin/env bash
# scripts/deps.sh: installs the Debian 12 packages cgr needs to build and
# test, if any is missing (run as root, or with sudo available).
set -eu
pkgs="autoconf automake libtool pkg-config make gcc g++ liburing-dev
libjemalloc-dev libdlpack-dev libck-dev dpdk-dev libopenmpi-dev openmpi-bin libgloo-dev
libpmix-dev libucx-dev iproute2"
missing=""
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
		missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "cgr: installing:$missing" >&2
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
# shellcheck disable=SC2086
$SUDO apt-get install -y -q --no-install-recommends $missing
