// The sandbox's seccomp filter (sandbox.h), compiled with libseccomp into a classic BPF
// program that bwrap loads (`--seccomp FD`) just before it starts the command.
//
// Everything not listed is allowed (a deny list: the namespaces and limits do the
// containing; this removes the kernel surface a contained process has no use for):
// - socket() for any family but AF_UNIX: EAFNOSUPPORT (the network namespace has only its
//   own loopback anyway; AF_UNIX stays for Python's multiprocessing);
// - ptrace, process_vm_readv/writev, mount and the new mount API, umount2, pivot_root,
//   chroot, unshare, setns, keyctl, add_key, request_key, bpf, perf_event_open,
//   userfaultfd, io_uring_*, kexec_*, *_module, reboot, swapon/off, syslog, acct,
//   quotactl(_fd), open_by_handle_at, name_to_handle_at, fanotify_init, clock and time
//   setting, ioperm, iopl, vhangup, fsconfig, pidfd_getfd, process_madvise, kcmp, uselib,
//   lookup_dcookie, NUMA memory policy calls, and ioctl(TIOCSTI): EPERM;
// - memfd_create and shmget: EPERM (memory there escapes the address-space limit; POSIX
//   shared memory stays, in a 1 MiB /dev/shm);
// - clone with CLONE_NEWUSER: EPERM; clone3: ENOSYS (its flags are out of a filter's
//   reach; glibc then uses clone);
// - system calls of another architecture's ABI (x32, i386): the process is killed.
#pragma once

namespace tandem {

// A memfd holding the BPF program, positioned at its start, close-on-exec set (clear it
// in the child that passes it to bwrap). The caller owns it. Throws Error on failure.
int make_sandbox_seccomp_fd();

}  // namespace tandem
