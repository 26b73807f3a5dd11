#!/bin/bash
# Which systemd sandboxing directives (emulated) the CUDA driver and CUDA IPC
# tolerate: kerntuned under each, a `kerntune run` per tensor path. Beside
# it: kt.tar.gz (kt/bin/{kerntuned,kerntune} and kt/lib/, their libraries),
# sandbox_exec (gcc -O2 -static -o sandbox_exec sandbox_exec.c -lseccomp),
# procmount.sh and rootro.sh. As root on the GPU host: OUT=dir bash sb.sh
set -u
D=$(cd "$(dirname "$0")" && pwd)
mkdir -p /opt && tar -xzf $D/kt.tar.gz -C /opt
K=/opt/kt; export LD_LIBRARY_PATH=$K/lib
W=$D/sandbox_exec
R=$OUT/results.txt
log() { echo "$*" | tee -a $R; }
{ uname -r; nvidia-smi -L; grep -i nvidia /proc/devices; ls -l /dev/nvidia* /dev/nvidia-caps 2>&1; command -v setpriv unshare; head -1 /proc/driver/nvidia/version; } >> $R 2>&1
S=/dev/shm/kts; mkdir -p $S; chmod 1777 $S
NOBODY="setpriv --reuid=65534 --regid=65534 --clear-groups"
DAC="--inh-caps=+dac_override --ambient-caps=+dac_override"
exp() {
  local name=$1 dprefix=$2 cprefix=$3; shift 3
  rm -f $S/k.sock
  $dprefix $K/bin/kerntuned --socket=$S/k.sock --db=/nonexistent/t.db > $OUT/d_$name.log 2>&1 &
  local pid=$!
  for i in $(seq 200); do [ -S $S/k.sock ] && break; sleep 0.1; done
  for via in "$@"; do
    out=$(timeout 60 $cprefix $K/bin/kerntune run softmax --server=unix:$S/k.sock --dtype=float16 --rows=64 --cols=1000 --via=$via 2>&1); rc=$?
    log "$name via=$via rc=$rc | $(echo "$out" | grep -E '^backend|^check|rror|kerntune' | tr '\n' ' ' | cut -c1-260)"
  done
  kill -TERM $pid 2>/dev/null; (sleep 15; kill -KILL $pid 2>/dev/null) & wait $pid 2>/dev/null
  log "$name daemon: $(grep -E 'backend|GPU|rror' $OUT/d_$name.log | head -2 | tr '\n' ' ' | cut -c1-200)"
}
exp base "" "" ipc shm inline
exp nobody "$NOBODY" "" ipc shm
exp nobody_dac "$NOBODY $DAC" "" ipc shm
exp nobody_dac_otheruser "$NOBODY $DAC" "setpriv --reuid=1000 --regid=65534 --clear-groups" ipc shm
exp nnp "$W --nnp" "" ipc
exp mdwe "$W --mdwe" "" ipc shm
exp syscalls_families "$W --syscalls --families" "" ipc shm
exp all_seccomp "$W --nnp --mdwe --syscalls --families" "" ipc shm
exp ipcns "unshare --ipc" "" ipc shm
exp netns "unshare --net" "" ipc
exp rootro "unshare --mount --propagation private $D/rootro.sh" "" ipc shm
exp procsubset "unshare --mount --propagation private $D/procmount.sh subset=pid" "" ipc
exp hidepid "unshare --mount --propagation private $D/procmount.sh hidepid=invisible $NOBODY $DAC" "" ipc
exp client_pidns "" "unshare --pid --fork --mount-proc" ipc shm
exp daemon_pidns "unshare --pid --fork --mount-proc --kill-child=SIGTERM" "" ipc inline
exp client_ipcns "" "unshare --ipc" ipc shm
log done
for f in $OUT/d_*.log; do echo "== $f"; cat $f; done > $OUT/daemon_logs.txt; rm -f $OUT/d_*.log
