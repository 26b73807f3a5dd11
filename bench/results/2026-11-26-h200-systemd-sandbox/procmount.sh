#!/bin/sh
# procmount.sh OPTIONS cmd...: a fresh /proc with OPTIONS (subset=pid,
# hidepid=invisible), in the caller's (new) mount namespace.
opts=$1; shift
mount -t proc -o "$opts" proc /proc || exit 97
exec "$@"
