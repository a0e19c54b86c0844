#!/bin/sh
# testimage.sh NAME:TAG — imports a tiny image from Debian's static busybox:
# /bin/<applet> links (never over busybox itself), PATH set, no registry.
set -eu
ref=$1
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/bin" "$root/tmp" "$root/etc"
cp /bin/busybox "$root/bin/busybox"
for app in $(/bin/busybox --list); do
	[ "$app" = busybox ] && continue
	ln -s busybox "$root/bin/$app"
done
echo 'root:x:0:0:root:/root:/bin/sh' > "$root/etc/passwd"
echo 'root:x:0:' > "$root/etc/group"
tar -C "$root" -c . | docker import -c 'ENV PATH=/bin' - "$ref" >/dev/null
