#!/usr/bin/env bash
# deploy/systemd's units and sysusers file, checked offline against an
# alternate root that holds the programs they run (/opt/kerntune/bin) and
# the system's own units:
#  - `systemd-analyze verify` passes with no output at all: it exits 0 on an
#    unknown or misspelt directive, warning only, so any output fails;
#  - the exposure of each unit (`systemd-analyze security --offline`) stays
#    at or below what deploy/systemd/README.md states;
#  - kerntuned.service sets LimitNOFILE (at least 16384);
#  - systemd-sysusers makes the kerntune user and group from the file;
#  - and the checks fail where they must: a unit whose program is missing,
#    and one with an unknown directive.
#   systemd_units_test.sh SOURCE_DIR KERNTUNED KERNTUNE
set -euo pipefail
src=$1 kerntuned=$2 kerntune=$3
units="$src/deploy/systemd"
command -v systemd-analyze > /dev/null || { echo "FAIL: no systemd-analyze (apt install systemd)"; exit 1; }

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/opt/kerntune/bin" "$root/etc/systemd/system" "$root/usr/lib/systemd"
cp "$kerntuned" "$root/opt/kerntune/bin/kerntuned"
cp "$kerntune" "$root/opt/kerntune/bin/kerntune"
cp -r /usr/lib/systemd/system "$root/usr/lib/systemd/"
cp "$units"/*.service "$root/etc/systemd/system/"

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# verify UNIT...: 0 when systemd-analyze exits 0 and prints nothing.
verify() {
  local output
  if ! output=$(systemd-analyze verify --root="$root" "$@" 2>&1); then
    echo "$output"
    return 1
  fi
  [ -z "$output" ] || { echo "$output"; return 1; }
}

for unit in kerntuned.service kerntune-tune.service; do
  if verify "$unit"; then echo "ok: systemd-analyze verify $unit"; else fail "verify $unit"; fi
done

# The exposure levels README.md gives, times 10 (systemd-analyze's scale).
declare -A ceiling=([kerntuned.service]=23 [kerntune-tune.service]=11)
for unit in "${!ceiling[@]}"; do
  level=$(systemd-analyze security --offline=yes --root="$root" "$unit" 2>&1 | tail -1)
  if systemd-analyze security --offline=yes --root="$root" --threshold="${ceiling[$unit]}" \
      "$unit" > /dev/null 2>&1; then
    echo "ok: $level"
  else
    fail "$unit is more exposed than ${ceiling[$unit]}/10: $level"
  fi
done

# The daemon's descriptor limit: room for many clients' connections.
nofile=$(sed -n 's/^LimitNOFILE=//p' "$units/kerntuned.service")
if [[ "$nofile" =~ ^[0-9]+$ ]] && [ "$nofile" -ge 16384 ]; then
  echo "ok: kerntuned.service sets LimitNOFILE=$nofile"
else
  fail "kerntuned.service sets no LimitNOFILE of at least 16384 (got '${nofile}')"
fi

mkdir -p "$root/sysusers/etc"
systemd-sysusers --root="$root/sysusers" "$units/kerntune.sysusers" > /dev/null 2>&1 ||
  fail "systemd-sysusers rejected kerntune.sysusers"
if grep -q '^kerntune:x:[0-9]*:[0-9]*:.*:/var/lib/kerntune:' "$root/sysusers/etc/passwd" &&
   grep -q '^kerntune:x:' "$root/sysusers/etc/group"; then
  echo "ok: systemd-sysusers makes the kerntune user and group"
else
  fail "kerntune.sysusers made no kerntune user and group"
fi

# The checks can fail: the daemon's program gone, then a misspelt directive.
mv "$root/opt/kerntune/bin/kerntuned" "$root/kerntuned.away"
if verify kerntuned.service > /dev/null; then fail "verify passed with no kerntuned"; fi
mv "$root/kerntuned.away" "$root/opt/kerntune/bin/kerntuned"
sed 's/^ProtectHome=yes/ProtectHomes=yes/' "$units/kerntuned.service" \
  > "$root/etc/systemd/system/kerntuned-typo.service"
if verify kerntuned-typo.service > /dev/null; then fail "verify passed a misspelt directive"; fi
echo "ok: verify fails with a missing program and with a misspelt directive"

[ "$failures" -eq 0 ] || exit 1
echo "systemd_units_test: passed"
