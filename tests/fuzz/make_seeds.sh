#!/usr/bin/env bash
# Writes the seeds of corpus/ that are made from readable sources:
#  - kt_run_request_fuzzer: seeds/run_request/*.txtpb (text RunRequests)
#    after the harness's setup bytes (two registrations: 64 KiB and 1 MiB);
#  - kt_register_buffer_fuzzer: seeds/register_buffer/*.txtpb;
#  - kt_tuning_store_fuzzer, given a build directory: a store that
#    `kerntune configs import` made from corpus/kt_config_file_fuzzer/h100.json,
#    with 512-byte pages so that the file stays small (WAL and rollback
#    journal headers).
# The other corpora are hand-written files or inputs kept from fuzzing runs.
# Usage: tests/fuzz/make_seeds.sh [BUILD_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
proto_dir="$here/../../proto"

encode() {  # MESSAGE FILE
  protoc --encode="kerntune.v1.$1" -I "$proto_dir" "$proto_dir/kerntune/v1/kerntune.proto" < "$2"
}

# Setup: two registrations (count 2 << 1), over host regions 1 and 2, whole.
setup='\x04\x01\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00'
for source in "$here"/seeds/run_request/*.txtpb; do
  { printf "$setup"; encode RunRequest "$source"; } \
    > "$here/corpus/kt_run_request_fuzzer/$(basename "$source" .txtpb)"
done
for source in "$here"/seeds/register_buffer/*.txtpb; do
  encode RegisterBufferRequest "$source" \
    > "$here/corpus/kt_register_buffer_fuzzer/$(basename "$source" .txtpb)"
done

if [ $# -ge 1 ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  "$1/client/kerntune" configs import --db="$work/store.db" \
    "$here/corpus/kt_config_file_fuzzer/h100.json" > /dev/null
  sqlite3 "$work/store.db" "PRAGMA journal_mode=DELETE; PRAGMA page_size=512; VACUUM;" > /dev/null
  cp "$work/store.db" "$here/corpus/kt_tuning_store_fuzzer/rollback_journal.db"
  sqlite3 "$work/store.db" "PRAGMA journal_mode=WAL;" > /dev/null
  cp "$work/store.db" "$here/corpus/kt_tuning_store_fuzzer/wal.db"
fi
