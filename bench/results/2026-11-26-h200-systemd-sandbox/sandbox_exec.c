// Emulates some systemd sandboxing directives for one program, to learn
// which of them the CUDA driver tolerates (no systemd on the GPU host):
//   --nnp        NoNewPrivileges=yes        (PR_SET_NO_NEW_PRIVS)
//   --mdwe       MemoryDenyWriteExecute=yes (PR_SET_MDWE, as systemd >= 253 does
//                 on Linux >= 6.3; older systemd uses seccomp for the same rule)
//   --syscalls   SystemCallFilter=@system-service (allow list, others SIGSYS)
//   --families   RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 (others EAFNOSUPPORT)
#include <errno.h>
#include <seccomp.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>
#include "system_service_syscalls.h"
#ifndef PR_SET_MDWE
#define PR_SET_MDWE 65
#define PR_MDWE_REFUSE_EXEC_GAIN 1
#endif
int main(int argc, char** argv) {
  int i = 1, nnp = 0, mdwe = 0, sys = 0, fam = 0;
  for (; i < argc && strncmp(argv[i], "--", 2) == 0; ++i) {
    if (!strcmp(argv[i], "--")) { ++i; break; }
    if (!strcmp(argv[i], "--nnp")) nnp = 1;
    else if (!strcmp(argv[i], "--mdwe")) mdwe = 1;
    else if (!strcmp(argv[i], "--syscalls")) sys = 1;
    else if (!strcmp(argv[i], "--families")) fam = 1;
    else { fprintf(stderr, "unknown %s\n", argv[i]); return 2; }
  }
  if (nnp && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) { perror("nnp"); return 1; }
  if (mdwe && prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0)) { perror("mdwe"); return 1; }
  if (sys || fam) {
    scmp_filter_ctx ctx = seccomp_init(sys ? SCMP_ACT_KILL_PROCESS : SCMP_ACT_ALLOW);
    if (sys) {
      for (size_t k = 0; k < sizeof(kSystemService) / sizeof(*kSystemService); ++k) {
        int nr = seccomp_syscall_resolve_name(kSystemService[k]);
        if (nr == __NR_SCMP_ERROR || nr < 0) continue;
        if (fam && nr == SCMP_SYS(socket)) continue;
        seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0);
      }
      // execve of the program itself.
      seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(execve), 0);
    }
    if (fam) {
      for (int k = 0; k < 46; ++k) {
        const int allowed = k == AF_UNIX || k == AF_INET || k == AF_INET6;
        if (allowed && !sys) continue;
        seccomp_rule_add(ctx, allowed ? SCMP_ACT_ALLOW : SCMP_ACT_ERRNO(EAFNOSUPPORT),
                         SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_EQ, k));
      }
    }
    int rc = seccomp_load(ctx);
    if (rc) { fprintf(stderr, "seccomp_load: %s\n", strerror(-rc)); return 1; }
  }
  execvp(argv[i], argv + i);
  perror("execvp");
  return 127;
}
