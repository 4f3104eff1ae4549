// The sandbox's seccomp filter (sandbox_seccomp.h).
#include "agent/sandbox_seccomp.h"

#include "core/error.h"

#include <sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace tandem {

namespace {

// Calls a contained process has no use for (sandbox_seccomp.h says why each group).
const char* const kDenied[] = {
    "ptrace", "process_vm_readv", "process_vm_writev",
    "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsmount", "fspick",
    "mount_setattr",
    "unshare", "setns",
    "keyctl", "add_key", "request_key",
    "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "reboot", "swapon", "swapoff", "syslog", "acct", "quotactl",
    "open_by_handle_at", "name_to_handle_at", "fanotify_init",
    "clock_settime", "clock_adjtime", "settimeofday", "adjtimex",
    "ioperm", "iopl", "vhangup",
    "fsconfig", "quotactl_fd", "pidfd_getfd", "process_madvise", "kcmp", "uselib", "lookup_dcookie",
    "mbind", "set_mempolicy", "migrate_pages", "move_pages",
    // Memory outside the address-space limit: anonymous files and System V segments.
    "memfd_create", "shmget",
};

struct ContextDeleter {
  void operator()(scmp_filter_ctx ctx) const { seccomp_release(ctx); }
};

void check(int rc, const char* what) {
  if (rc < 0) throw Error(fmt::format("sandbox: seccomp: {}: {}", what, std::strerror(-rc)));
}

}  // namespace

int make_sandbox_seccomp_fd() {
  std::unique_ptr<void, ContextDeleter> ctx(seccomp_init(SCMP_ACT_ALLOW));
  if (!ctx) throw Error("sandbox: seccomp_init failed");
  // Another ABI's system calls (i386, x32) would bypass a filter written for x86-64's numbers.
  check(seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS), "bad-arch action");
  for (const char* name : kDenied) {
    const int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) continue;  // not a system call of this architecture (or this libseccomp)
    check(seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EPERM), nr, 0), name);
  }
  // New user namespaces (bwrap's --disable-userns stops them too). clone3 passes its flags
  // in memory a filter cannot read: ENOSYS makes glibc fall back to clone, whose flags it can.
  check(seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                         SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER)),
        "clone CLONE_NEWUSER");
  check(seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0), "clone3");
  check(seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1,
                         SCMP_A0(SCMP_CMP_NE, static_cast<scmp_datum_t>(AF_UNIX))),
        "socket");
  // Pushing characters into the terminal's input (bwrap's --new-session also stops it).
  check(seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
                         SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, static_cast<scmp_datum_t>(TIOCSTI))),
        "ioctl TIOCSTI");
  const int fd = memfd_create("tandem-sandbox-seccomp", MFD_CLOEXEC);
  if (fd < 0) throw Error(fmt::format("sandbox: memfd_create: {}", std::strerror(errno)));
  const int rc = seccomp_export_bpf(ctx.get(), fd);
  if (rc < 0 || lseek(fd, 0, SEEK_SET) != 0) {
    ::close(fd);
    check(rc < 0 ? rc : -errno, "export");
  }
  return fd;
}

}  // namespace tandem
