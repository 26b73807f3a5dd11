#!/bin/sh
# ProtectSystem=strict + ProtectHome=yes + PrivateTmp=yes + ProtectKernelTunables=yes, roughly:
# / read-only, /root and /home empty, a private /tmp, /sys and /proc/sys read-only.
mount --bind / / && mount -o remount,bind,ro / || exit 97
for d in /root /home; do [ -d $d ] && mount -t tmpfs -o ro tmpfs $d; done
mount -t tmpfs tmpfs /tmp || exit 97
mount --bind /sys /sys && mount -o remount,bind,ro /sys /sys || exit 97
mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys /proc/sys || exit 97
exec "$@"
