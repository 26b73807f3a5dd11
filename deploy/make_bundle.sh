#!/usr/bin/env bash
# Makes a relocatable bundle of a kerntune build: the installed binaries in
# <dest>/bin plus every shared library they load that is not part of the base
# system (glibc, libstdc++, libgcc; the CUDA driver comes with the host), in
# <dest>/lib, found through the binaries' RPATH $ORIGIN/../lib, and the
# shipped tuned configs (deploy/configs/*.json) in
# <dest>/share/kerntune/configs, where kerntuned and kerntune look by default.
# A GPU host with only the NVIDIA driver runs it as is.
#
#   deploy/make_bundle.sh [build-dir] [dest] [archive.tar.gz]
#                                      (defaults: build dist, no archive)
#
# With an archive path it also packs the bundle into one gzip tarball
# (`tar -xzf` on the host): the kernels' device code compresses about 3:1,
# which matters when the bundle travels over a size-limited channel.
set -euo pipefail

build=${1:-build}
dest=${2:-dist}
archive=${3:-}

[ -d "$build" ] || { echo "make_bundle: no build directory '$build'" >&2; exit 2; }
rm -rf "$dest"
cmake --install "$build" --prefix "$dest" > /dev/null
mkdir -p "$dest/lib"

# Libraries every Linux host has, or that must come from the host (driver).
is_system_lib() {
  case "$(basename "$1")" in
    linux-vdso.so*|ld-linux*.so*|libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|\
    libresolv.so*|libutil.so*|libstdc++.so*|libgcc_s.so*|libcuda.so*|libnvidia-*.so*)
      return 0 ;;
  esac
  return 1
}

count=0
# The programs, and the in-process runtime that Python processes load.
for binary in "$dest"/bin/* "$dest"/lib/libkerntune_runtime.so; do
  file -b "$binary" | grep -q ELF || continue
  # `ldd` prints "name => path (addr)"; a missing library is an error here,
  # not on the GPU host.
  if ldd "$binary" | grep -q 'not found'; then
    echo "make_bundle: $binary has unresolved libraries:" >&2
    ldd "$binary" | grep 'not found' >&2
    exit 1
  fi
  while read -r lib; do
    is_system_lib "$lib" && continue
    if [ ! -e "$dest/lib/$(basename "$lib")" ]; then
      cp -L "$lib" "$dest/lib/"
      count=$((count + 1))
    fi
  done < <(ldd "$binary" | awk '/=> \// { print $3 }')
done

# cmake --install put the shipped configs there; an empty directory is still
# made, so that the programs never fall back to the build machine's sources.
configs="$dest/share/kerntune/configs"
mkdir -p "$configs"
shipped=$(find "$configs" -maxdepth 1 -name '*.json' | wc -l)

echo "bundle: $dest ($(ls "$dest/bin" | wc -l) programs, $count bundled libraries," \
  "$shipped shipped config files, $(du -sh "$dest" | cut -f1))"
if [ -n "$archive" ]; then
  mkdir -p "$(dirname "$archive")"
  tar -C "$dest" -czf "$archive" .
  echo "archive: $archive ($(du -sh "$archive" | cut -f1); unpack with tar -xzf)"
fi
