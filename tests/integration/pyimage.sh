#!/bin/sh
# pyimage.sh NAME:TAG — imports a minimal Debian bookworm with python3
# (debootstrap minbase from deb.debian.org, no registry), trimmed of apt
# caches, docs, man pages and locales, PATH set, a non-root user guest
# (uid/gid 1000), no /maf-sandbox (the daemon makes its storage base).
# pyimage.sh --tarball builds only the root's tarball (no engine) and
# prints its path.
#
# The debootstrap takes about a minute, so its tarball is cached in
# ${MSB_PYIMAGE_CACHE:-/var/cache/maf-sandbox-test}/python-bookworm-<packages hash>.tar and
# made again only when missing (delete it to rebuild). It is written under
# a temporary name and renamed: an interrupted build (its process group
# signalled, as Ctrl-C does) leaves no tarball, root or mount behind.
# Building it needs root and debootstrap (installed with apt-get if
# missing).
set -eu
ref=${1:?usage: pyimage.sh NAME:TAG | --tarball}
cache=${MSB_PYIMAGE_CACHE:-/var/cache/maf-sandbox-test}
# python3 for codeact's program channel; curl (and the CA bundle it reads) for maf-sandbox's
# egress probes; openssl for the TLS server those probes reach. The list names the tarball, so
# changing it makes a new one.
packages=python3-minimal,python3,curl,ca-certificates,openssl
tarball=$cache/python-bookworm-$(printf %s "$packages" | sha256sum | cut -c1-12).tar
suite=bookworm
mirror=http://deb.debian.org/debian

root=
partial=
cleanup() {
	if [ -n "$root" ]; then
		# debootstrap mounts /proc and /sys in the root; an interrupted
		# one may leave them there.
		awk -v r="$root" 'index($2, r "/") == 1 { print $2 }' /proc/mounts |
			sort -r | while read -r m; do umount -l "$m" || true; done
		rm -rf --one-file-system "$root"
	fi
	[ -z "$partial" ] || rm -f "$partial"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

build_tarball() {
	if ! command -v debootstrap >/dev/null 2>&1; then
		echo "pyimage.sh: installing debootstrap" >&2
		DEBIAN_FRONTEND=noninteractive apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			debootstrap >/dev/null
	fi
	mkdir -p "$cache"
	root=$(mktemp -d "${TMPDIR:-/tmp}/pyimage.XXXXXX")
	debootstrap --variant=minbase --include="$packages" \
		"$suite" "$root" "$mirror" >&2
	# Trim: apt's caches and lists, docs, man and info pages, translations
	# (locale.alias stays: glibc reads it), logs, backup copies.
	rm -rf "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/* \
		"$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
		"$root"/usr/share/lintian "$root"/usr/share/linda \
		"$root"/var/cache/debconf/*-old "$root"/var/lib/dpkg/*-old \
		"$root"/var/log/* "$root"/dev/*
	find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias \
		-exec rm -rf {} +
	# The runtime mounts its own /dev; the image needs only the directory.
	mkdir -p "$root/var/lib/apt/lists/partial" "$root/var/cache/apt/archives/partial"
	echo 'guest:x:1000:1000:guest:/home/guest:/bin/sh' >> "$root/etc/passwd"
	echo 'guest:x:1000:' >> "$root/etc/group"
	echo 'guest:*:19000:0:99999:7:::' >> "$root/etc/shadow"
	echo 'guest:*::' >> "$root/etc/gshadow"
	mkdir -p "$root/home/guest"
	chown 1000:1000 "$root/home/guest"
	if [ -e "$root/maf-sandbox" ]; then
		echo "pyimage.sh: $root/maf-sandbox exists; the daemon must make it" >&2
		exit 1
	fi
	[ -x "$root/usr/bin/python3" ] || { echo "pyimage.sh: no python3 in the root" >&2; exit 1; }
	partial=$tarball.partial.$$
	tar -C "$root" --numeric-owner -cf "$partial" .
	mv -f "$partial" "$tarball"
	partial=
}

[ -f "$tarball" ] || build_tarball
if [ "$ref" = --tarball ]; then
	echo "$tarball"
	exit 0
fi
docker import -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
	- "$ref" < "$tarball" >/dev/null
