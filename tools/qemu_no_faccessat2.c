/* Run a command with the faccessat2 system call answering ENOSYS (tools/aarch64_check.py).
 *
 * proot 5.1 (Debian bookworm's and trixie's) translates guest paths in faccessat but not in
 * faccessat2, which glibc >= 2.33 tries first; under `proot -q qemu-aarch64-static` every
 * access() of the arm64 root then looks at the host's path instead (gcc finds no cc1, `test -x`
 * fails). With faccessat2 refused, glibc falls back to faccessat, which proot translates.
 * Usage: qemu_no_faccessat2 /usr/bin/qemu-aarch64-static [args...] (as proot's -q command).
 * x86-64 hosts only: other architectures' system calls pass untouched. */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <unistd.h>

#ifndef __NR_faccessat2
#define __NR_faccessat2 439
#endif

int main(int argc, char **argv) {
  struct sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_faccessat2, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {sizeof(filter) / sizeof(filter[0]), filter};
  if (argc < 2) {
    fprintf(stderr, "usage: %s COMMAND [ARGS...]\n", argv[0]);
    return 2;
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
    perror("qemu_no_faccessat2: seccomp");
    return 2;
  }
  execv(argv[1], argv + 1);
  perror(argv[1]);
  return 127;
}
