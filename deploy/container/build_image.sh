#!/usr/bin/env bash
# Builds kerntune's container image with no registry involved: a Debian 12
# root filesystem made by debootstrap from Debian's packages (minbase: the
# bundle carries every library that is not glibc or libstdc++; python3 is
# there for kerntune-publish-configmap, deploy/k8s), plus the daemon and the
# CLI of a bundle (deploy/make_bundle.sh) in /opt/kerntune. Then:
#  1. the root filesystem is tested: kerntuned (no GPU here: the CPU backend)
#     serves a `kerntune run` and a `kerntune status` inside it (chroot, in
#     fresh mount and pid namespaces);
#  2. when buildah works on this machine, it is made into an OCI image,
#     written as an OCI archive (podman load / skopeo / ctr import);
#  3. when podman works too, the image is run as the DaemonSet runs it (its
#     own entrypoint and arguments, --pid=host, the socket directory from the
#     host, the socket's group 2424) and sent requests from inside the
#     container and from the host: a member of that group with a tensor in
#     its shared memory is served, a user outside it is refused.
# Without buildah it leaves a root filesystem tarball and says so; without
# podman it says the image itself was not run. Root is needed (debootstrap,
# chroot). Nothing is kept between runs: buildah's and podman's storage live
# in a temporary directory.
#
#   deploy/container/build_image.sh BUNDLE OUT
#
# BUNDLE: a directory made by deploy/make_bundle.sh. OUT: receives
# kerntune-<version>.oci.tar (or kerntune-<version>-rootfs.tar.gz without
# buildah). Environment: DEBIAN_MIRROR (default http://deb.debian.org/debian),
# IMAGE_NAME (default localhost/kerntune), IMAGE_TAG (default the bundle's
# version).
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 BUNDLE OUT" >&2
  exit 2
fi
bundle=$(realpath "$1")
out=$(realpath -m "$2")
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=bookworm
here=$(dirname "$(realpath "$0")")

say() { echo "build_image: $*"; }
die() { echo "build_image: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "run as root (debootstrap and chroot need it)"
command -v debootstrap > /dev/null || die "no debootstrap (apt install debootstrap)"
for path in bin/kerntuned bin/kerntune bin/kerntune-publish-configmap lib share/kerntune/VERSION; do
  [ -e "$bundle/$path" ] || die "$bundle is not a bundle of deploy/make_bundle.sh: no $path"
done
version=$(cat "$bundle/share/kerntune/VERSION")
image="${IMAGE_NAME:-localhost/kerntune}:${IMAGE_TAG:-$version}"
mkdir -p "$out"

work=$(mktemp -d /var/tmp/kerntune-image.XXXXXX)
rootfs="$work/rootfs"
mkdir -p "$work/store"
storage=(--root "$work/storage" --runroot "$work/run" --storage-driver overlay)
container=""
cleanup() {
  if [ -n "$container" ]; then podman "${storage[@]}" rm -f "$container" > /dev/null 2>&1 || true; fi
  if command -v buildah > /dev/null && [ -d "$work/storage" ]; then
    buildah "${storage[@]}" rm --all > /dev/null 2>&1 || true
    podman "${storage[@]}" rm --all --force > /dev/null 2>&1 || true
    buildah "${storage[@]}" rmi --all --force > /dev/null 2>&1 || true
  fi
  # Left-over mounts under $work would make rm fail loudly rather than
  # delete through them.
  grep -o " $work[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l 2> /dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# 1. The root filesystem.
start=$SECONDS
say "debootstrap $suite (minbase + python3) from $mirror"
if ! debootstrap --variant=minbase --include=python3 "$suite" "$rootfs" "$mirror" \
    > "$work/debootstrap.out" 2>&1; then
  tail -20 "$work/debootstrap.out" >&2
  [ -f "$rootfs/debootstrap/debootstrap.log" ] && tail -20 "$rootfs/debootstrap/debootstrap.log" >&2
  die "debootstrap failed"
fi
say "debootstrap took $((SECONDS - start)) s"

# The daemon, the CLI, the publisher, their libraries and the shipped
# configs; not the bundle's tests and benchmarks.
prefix="$rootfs/opt/kerntune"
mkdir -p "$prefix/bin" "$prefix/share/kerntune"
cp -a "$bundle/bin/kerntuned" "$bundle/bin/kerntune" "$bundle/bin/kerntune-publish-configmap" \
  "$prefix/bin/"
cp -a "$bundle/lib" "$prefix/"
cp -a "$bundle/share/kerntune/." "$prefix/share/kerntune/"
for program in kerntuned kerntune kerntune-publish-configmap; do
  ln -s "/opt/kerntune/bin/$program" "$rootfs/usr/local/bin/$program"
done
mkdir -p "$rootfs/run/kerntune" "$rootfs/var/lib/kerntune"
chroot "$rootfs" apt-get clean
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/log/*.log \
  "$rootfs/var/cache/debconf"/*-old
say "root filesystem: $(du -sh "$rootfs" | cut -f1)"

# A request served inside a root filesystem: the daemon on its default
# socket (the GPU when there is one, else the CPU backend), `kerntune run`
# checked against the fp64 reference, `kerntune status`, then SIGTERM,
# which must remove the socket.
cat > "$work/serve_test.sh" <<'EOF'
set -eu
socket=/run/kerntune/kerntune.sock
kerntuned --socket=$socket --db=/var/lib/kerntune/tuning.db > /tmp/kerntuned.log 2>&1 &
daemon=$!
i=0
while [ ! -S $socket ]; do
  i=$((i + 1))
  if [ $i -gt 100 ] || ! kill -0 $daemon 2> /dev/null; then cat /tmp/kerntuned.log; exit 1; fi
  sleep 0.1
done
kerntune run softmax --server=unix:$socket --dtype=float32 --rows=64 --cols=1000
kerntune status --server=unix:$socket
kill -TERM $daemon
wait $daemon
if [ -e $socket ]; then echo "the socket outlived the daemon"; exit 1; fi
echo "serve_test: ok"
EOF
say "testing the root filesystem: kerntuned serving inside it (chroot)"
cp "$work/serve_test.sh" "$rootfs/tmp/serve_test.sh"
unshare --mount --pid --fork --mount-proc="$rootfs/proc" \
  chroot "$rootfs" /bin/sh /tmp/serve_test.sh
rm -f "$rootfs/tmp/serve_test.sh" "$rootfs/tmp/kerntuned.log"

# 2. The image.
if ! command -v buildah > /dev/null || ! buildah "${storage[@]}" info > "$work/buildah.out" 2>&1; then
  tarball="$out/kerntune-$version-rootfs.tar.gz"
  tar -C "$rootfs" --numeric-owner -czf "$tarball" .
  [ -s "$work/buildah.out" ] && tail -5 "$work/buildah.out"
  say "buildah is not usable on this machine: no OCI image made. The root filesystem was built"
  say "and tested (chroot); it is $tarball (podman import / docker import)."
  exit 0
fi
say "making the OCI image $image with buildah"
container=$(buildah "${storage[@]}" from scratch)
mount=$(buildah "${storage[@]}" mount "$container")
tar -C "$rootfs" --numeric-owner -cf - . | tar -C "$mount" --numeric-owner -xf -
buildah "${storage[@]}" umount "$container" > /dev/null
# NVIDIA_*: what the NVIDIA container runtime gives the container (every
# GPU, the CUDA driver library and nvidia-smi); README.md says how to run it.
buildah "${storage[@]}" config \
  --entrypoint '["/opt/kerntune/bin/kerntuned"]' \
  --cmd '--socket=/run/kerntune/kerntune.sock --db=/var/lib/kerntune/tuning.db' \
  --env PATH=/opt/kerntune/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --env NVIDIA_VISIBLE_DEVICES=all \
  --env NVIDIA_DRIVER_CAPABILITIES=compute,utility \
  --volume /run/kerntune --volume /var/lib/kerntune \
  --label org.opencontainers.image.title=kerntune \
  --label org.opencontainers.image.version="$version" \
  --label org.opencontainers.image.description="kerntuned: tuned row-wise GPU kernels for a node" \
  "$container"
buildah "${storage[@]}" commit --quiet --format oci "$container" "$image" > /dev/null
buildah "${storage[@]}" rm "$container" > /dev/null
container=""
archive="$out/kerntune-$version.oci.tar"
rm -f "$archive"
buildah "${storage[@]}" push --quiet "$image" "oci-archive:$archive:$image"
say "image $image: $archive ($(du -sh "$archive" | cut -f1))"

# 3. The image, run.
if ! command -v podman > /dev/null || ! podman "${storage[@]}" info > "$work/podman.out" 2>&1; then
  tail -5 "$work/podman.out" 2> /dev/null || true
  say "podman is not usable on this machine: the image was built but not run; its root"
  say "filesystem was tested (chroot)."
  exit 0
fi
# As the DaemonSet runs it: the host's pid namespace, the socket directory
# from the host, a read-only root, DAC_OVERRIDE as the one capability and
# the socket's group 2424 (deploy/k8s); --ipc=host for shared memory.
# runc when there is one (crun 1.8 refuses a hybrid cgroup v1/v2 layout),
# and limits no higher than a root without CAP_SYS_RESOURCE may set.
run_flags=(--network=none --pid=host --ipc=host --user 0:2424 --read-only --cap-drop=ALL
           --cap-add=DAC_OVERRIDE --ulimit nofile=4096:4096 --ulimit nproc=4096:4096)
if command -v runc > /dev/null; then run_flags+=(--runtime runc); fi
say "running the image as the DaemonSet does (podman run ${run_flags[*]})"
sockets="$work/sockets"
mkdir -p "$sockets"
chmod 755 "$work" "$sockets"
container=$(podman "${storage[@]}" run --detach "${run_flags[@]}" \
  --volume "$sockets:/run/kerntune" --volume "$work/store:/var/lib/kerntune" "$image")
for _ in $(seq 100); do [ -S "$sockets/kerntune.sock" ] && break; sleep 0.1; done
if [ ! -S "$sockets/kerntune.sock" ]; then
  podman "${storage[@]}" logs "$container" >&2
  die "the image's kerntuned made no socket"
fi
podman "${storage[@]}" exec "$container" \
  kerntune run layer_norm --dtype=float32 --rows=32 --cols=768
# Processes of the host, through the shared socket directory, as pods of
# the node would be: a user in the socket's group, with a tensor in its own
# shared memory (0600), is served; one outside the group is not let in.
# (The root filesystem's kerntune: every user can reach it under $work.)
client="$rootfs/opt/kerntune/bin/kerntune"
setpriv --reuid=1000 --regid=1000 --groups=2424 "$client" run softmax --server="unix:$sockets/kerntune.sock" \
  --dtype=float32 --rows=16 --cols=512 --via=shm
if setpriv --reuid=1000 --regid=1000 --clear-groups "$client" status \
    --server="unix:$sockets/kerntune.sock" > "$work/outsider.out" 2>&1; then
  die "a user outside the socket's group reached the daemon"
fi
grep -q "Permission denied" "$work/outsider.out" || { cat "$work/outsider.out"; die "no Permission denied"; }
podman "${storage[@]}" exec "$container" kerntune status
podman "${storage[@]}" stop --time 20 "$container" > /dev/null
code=$(podman "${storage[@]}" inspect --format '{{.State.ExitCode}}' "$container")
[ "$code" = 0 ] || { podman "${storage[@]}" logs "$container" >&2; die "kerntuned exited $code"; }
[ ! -e "$sockets/kerntune.sock" ] || die "the socket outlived the container's daemon"
podman "${storage[@]}" rm "$container" > /dev/null
container=""
say "image tested: kerntuned served requests from inside the container and from the host"
