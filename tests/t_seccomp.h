/*
 * tests/t_seccomp.h: makes an io_uring system call fail for real, so that a
 * test can exercise the futex fallback the way a locked-down container
 * forces it (container runtimes' profiles refuse io_uring_setup, or allow
 * it and refuse io_uring_enter or io_uring_register).
 *
 *   t_seccomp_deny(nr)         installs a seccomp filter on the calling
 *                              process (and, with TSYNC, on every thread
 *                              it already has) that answers system call
 *                              nr with EPERM and allows every other call.
 *                              Threads started later inherit it.  Returns
 *                              0 or a negative errno (-EOPNOTSUPP on an
 *                              unknown architecture).
 *   t_seccomp_deny_io_uring()  t_seccomp_deny(__NR_io_uring_setup); call
 *                              it first thing in main, before any thread.
 *
 * The filter is irreversible for the process, which is why it lives in a
 * test program of its own.  It needs no privilege: PR_SET_NO_NEW_PRIVS is
 * what lets an unprivileged process install a filter.
 */
#ifndef CGR_TEST_SECCOMP_H
#define CGR_TEST_SECCOMP_H

#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__) && !defined(__ILP32__)
#define T_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define T_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif

#ifndef SECCOMP_FILTER_FLAG_TSYNC
#define SECCOMP_FILTER_FLAG_TSYNC 1UL
#endif

static inline int t_seccomp_deny(long nr)
{
#if defined(T_AUDIT_ARCH)
	struct sock_filter f[] = {
	    /* A call made under another ABI numbers its system calls
	     * differently: leave it alone rather than misread it. */
	    BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
		     offsetof(struct seccomp_data, arch)),
	    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, T_AUDIT_ARCH, 0, 3),
	    BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
		     offsetof(struct seccomp_data, nr)),
	    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr, 0, 1),
	    BPF_STMT(BPF_RET | BPF_K,
		     SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
	    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {
	    .len = (unsigned short)(sizeof(f) / sizeof(f[0])),
	    .filter = f,
	};

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		return -errno;
	/* TSYNC: a sanitizer runtime may already have started a helper
	 * thread; the filter must cover it too.  Kernels without TSYNC
	 * (before 3.17) get the plain call. */
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
		    SECCOMP_FILTER_FLAG_TSYNC, &prog) == 0)
		return 0;
	if (errno == EINVAL &&
	    syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) == 0)
		return 0;
	if (errno != ENOSYS)
		return -errno;
	if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0)
		return -errno;
	return 0;
#else
	(void)nr;
	return -EOPNOTSUPP;
#endif
}

static inline int t_seccomp_deny_io_uring(void)
{
#ifdef __NR_io_uring_setup
	return t_seccomp_deny(__NR_io_uring_setup);
#else
	return -EOPNOTSUPP;
#endif
}

#endif
