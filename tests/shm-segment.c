/*
 * tests/shm-segment.c: memfd segments: create (page rounding, zero fill),
 * a second mapping of the same fd at another address sees the same bytes,
 * a forked child maps it too, bad arguments, unmap/close idempotence;
 * typed segments: sealed against resizing, and attach refuses (saying
 * why, leaving nothing open) a wrong kind or geometry, a bad magic, layout
 * version or header size, a size that lies about the file, an unsealed
 * file and one smaller than a header; hand-off over a Unix socket: a
 * forked child attaches the segment it was sent and writes to it, a
 * message or descriptor set that does not fit is refused with what came
 * closed, the deadline, a peer that hung up.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "shm/shm.h"
#include "tap.h"

/* ---- typed segments and hand-off ---------------------------------- */

static const uint64_t G[CGR__SHM_NGEOM] = { 64, 4096, 3, 0, 7 };

static int fd_count(void)
{
	return t_count_dir("/proc/self/fd");
}

/* attach's verdict on a copy of a good segment with one header field
 * changed by edit (offset, value of 8 bytes), or -1 on setup failure. */
static int attach_edited(size_t off, uint64_t val, size_t n, char *why,
			 size_t len)
{
	struct cgr__shm s, t;
	int ret;

	if (cgr__shm_create_typed("t", 1000, 9, G, &s) != 0)
		return -1;
	memcpy((char *)s.addr + off, &val, n);
	ret = cgr__shm_attach(s.fd, 9, G, &t, why, len);
	if (ret == 0)
		cgr__shm_close(&t);
	cgr__shm_close(&s);
	return ret;
}

static void check_typed(void)
{
	struct cgr__shm s, t;
	char why[200] = "";
	int fds0 = fd_count(), ret, fd;
	uint64_t other[CGR__SHM_NGEOM] = { 64, 4096, 4, 0, 7 };

	t_is(cgr__shm_create_typed("t", 1000, 0, G, &s), -EINVAL, "kind 0");
	ret = cgr__shm_create_typed("t", 1000, 9, G, &s);
	t_is(ret, 0, "typed segment");
	if (ret != 0)
		return;
	t_ok(ftruncate(s.fd, 100) != 0 && errno == EPERM,
	     "sealed: it cannot shrink");
	t_is(cgr__shm_attach(s.fd, 9, G, &t, why, sizeof(why)), 0,
	     "attach: kind and geometry agree");
	t_ok(t.size == s.size && memcmp(t.addr, s.addr, 64) == 0,
	     "...the same header");
	cgr__shm_close(&t);
	t_is(cgr__shm_attach(s.fd, 9, NULL, &t, why, sizeof(why)), 0,
	     "attach without expectations of geometry");
	cgr__shm_close(&t);
	t_ok(cgr__shm_attach(s.fd, 8, G, &t, why, sizeof(why)) == -EPROTO &&
		     strstr(why, "kind 9, expected 8"),
	     "wrong kind: %s", why);
	t_ok(cgr__shm_attach(s.fd, 9, other, &t, why, sizeof(why)) ==
			     -EPROTO &&
		     strstr(why, "geometry word 2 is 3, expected 4"),
	     "wrong geometry: %s", why);
	cgr__shm_close(&s);
	t_ok(attach_edited(0, 0x12345678, 4, why, sizeof(why)) == -EPROTO &&
		     strstr(why, "magic"),
	     "bad magic: %s", why);
	t_ok(attach_edited(4, 2, 2, why, sizeof(why)) == -EPROTO &&
		     strstr(why, "version 2"),
	     "another layout version: %s", why);
	t_ok(attach_edited(8, 32, 4, why, sizeof(why)) == -EPROTO &&
		     strstr(why, "header of 32"),
	     "another header size: %s", why);
	t_ok(attach_edited(16, 1u << 30, 8, why, sizeof(why)) == -EPROTO &&
		     strstr(why, "the header says 1073741824"),
	     "a size that lies about the file: %s", why);
	/* An unsealed file (cgr makes none: a bare memfd), and a sealed one
	 * too small for a header. */
	fd = memfd_create("plain", MFD_CLOEXEC);
	t_ok(fd >= 0 && ftruncate(fd, 4096) == 0 &&
		     cgr__shm_attach(fd, 9, G, &t, why, sizeof(why)) ==
			     -EPROTO &&
		     strstr(why, "not sealed"),
	     "an unsealed file: %s", why);
	if (fd >= 0)
		close(fd);
	fd = memfd_create("tiny", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	t_ok(fd >= 0 && ftruncate(fd, 16) == 0 &&
		     fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0 &&
		     cgr__shm_attach(fd, 9, G, &t, why, sizeof(why)) ==
			     -EPROTO &&
		     strstr(why, "smaller than a header"),
	     "a file smaller than a header: %s", why);
	if (fd >= 0)
		close(fd);
	t_is(fd_count(), fds0, "nothing left open by the refusals");
}

static void check_handoff(void)
{
	struct cgr__shm s, t;
	int sv[2], fds[4], got[4], status = 0, fds0 = fd_count();
	char buf[64], why[200];
	size_t len, n;
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0 ||
	    cgr__shm_create_typed("h", 4096, 9, G, &s) != 0) {
		t_ok(0, "hand-off setup");
		return;
	}
	/* A child attaches what it was handed and writes to it. */
	pid = fork();
	if (pid == 0) {
		int r = cgr__shm_recv(sv[1], buf, sizeof(buf), &len, got, 4,
				      &n, cgr__deadline(5000000000ll));
		if (r != 0 || n != 1 || len != 6 || memcmp(buf, "hello", 6))
			_exit(2);
		if (cgr__shm_attach(got[0], 9, G, &t, why, sizeof(why)) != 0)
			_exit(3);
		memcpy((char *)t.addr + 64, "child", 6);
		_exit(0);
	}
	t_is(cgr__shm_send(sv[0], "hello", 6, &s.fd, 1), 0, "send a segment");
	waitpid(pid, &status, 0);
	t_ok(WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
		     memcmp((char *)s.addr + 64, "child", 6) == 0,
	     "a child attached it and wrote (status %d)", status);

	/* Too long, too many descriptors: refused, what came closed. */
	int before = fd_count();
	fds[0] = fds[1] = fds[2] = s.fd;
	cgr__shm_send(sv[0], "0123456789abcdef", 16, fds, 1);
	t_is(cgr__shm_recv(sv[1], buf, 8, &len, got, 4, &n,
			   cgr__deadline(1000000000)),
	     -EPROTO, "a message longer than the buffer");
	cgr__shm_send(sv[0], "x", 1, fds, 3);
	t_is(cgr__shm_recv(sv[1], buf, sizeof(buf), &len, got, 2, &n,
			   cgr__deadline(1000000000)),
	     -EPROTO, "more descriptors than asked for");
	t_is(fd_count(), before, "...the descriptors that came are closed");
	t_is(cgr__shm_send(sv[0], "x", 1, fds, CGR__SHM_MAX_FDS + 1), -EINVAL,
	     "sending more than %d descriptors", CGR__SHM_MAX_FDS);
	/* Nothing comes; then the peer hangs up. */
	int64_t t0 = cgr__now_ns();
	t_is(cgr__shm_recv(sv[1], buf, sizeof(buf), &len, got, 4, &n,
			   cgr__deadline(20000000)),
	     -ETIMEDOUT, "nothing sent: the deadline (%.1f ms)",
	     (double)(cgr__now_ns() - t0) / 1e6);
	close(sv[0]);
	t_is(cgr__shm_recv(sv[1], buf, sizeof(buf), &len, got, 4, &n,
			   cgr__deadline(1000000000)),
	     -ECONNRESET, "the peer hung up");
	close(sv[1]);
	cgr__shm_close(&s);
	t_is(fd_count(), fds0, "nothing left open");
}

int main(int argc, char **argv)
{
	struct cgr__shm a, b, junk;
	long pg = sysconf(_SC_PAGESIZE);
	int ret, zero = 1, status = 0;
	size_t i;
	pid_t pid;

	t_init(argc, argv, 30);

	memset(&junk, 0x5a, sizeof(junk));
	b = junk;
	t_is(cgr__shm_create("t", 0, &b), -EINVAL, "create: size 0");
	t_is(cgr__shm_create("t", 1, NULL), -EINVAL, "create: NULL out");
	t_is(cgr__shm_map(-1, 0, &b), -EINVAL, "map: fd -1");
	t_is(cgr__shm_map(1000000, 0, &b), -EBADF, "map: closed fd");
	t_ok(memcmp(&b, &junk, sizeof(b)) == 0, "failures leave *out alone");

	ret = cgr__shm_create(NULL, 100, &a);
	t_is(ret, 0, "create 100 bytes");
	if (ret != 0)
		return t_done();
	t_is(a.size, pg, "rounded up to one page");
	for (i = 0; i < a.size; i++)
		zero &= ((unsigned char *)a.addr)[i] == 0;
	t_ok(zero, "zero-filled");
	t_ok(fcntl(a.fd, F_GETFD) & FD_CLOEXEC, "fd is close-on-exec");
	/* Sealed: no holder of the fd can resize it under a mapping. */
	t_ok(fcntl(a.fd, F_GET_SEALS) ==
		     (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
	     "sealed against shrinking, growing and new seals (0x%x)",
	     fcntl(a.fd, F_GET_SEALS));
	t_ok(ftruncate(a.fd, 0) != 0 && errno == EPERM,
	     "ftruncate to 0: EPERM");
	t_ok(ftruncate(a.fd, (off_t)a.size * 2) != 0 && errno == EPERM,
	     "ftruncate larger: EPERM");
	t_ok(fcntl(a.fd, F_ADD_SEALS, F_SEAL_WRITE) != 0 && errno == EPERM,
	     "no more seals (a peer cannot seal it against writes)");
	t_is((long)lseek(a.fd, 0, SEEK_END), (long)a.size, "size unchanged");

	t_is(cgr__shm_map(a.fd, a.size + 1, &b), -EINVAL,
	     "map: more than the file");
	t_is(cgr__shm_map(a.fd, 0, &b), 0, "map the same fd again");
	t_ok(b.addr != a.addr, "second mapping at another address");
	t_ok(b.fd != a.fd && b.fd >= 0, "second mapping owns a duplicate fd");
	t_is(b.size, a.size, "size 0 maps the whole file");
	memcpy(a.addr, "hello", 6);
	t_ok(memcmp(b.addr, "hello", 6) == 0, "writes show through both");

	pid = fork();
	if (pid == 0) {
		struct cgr__shm c;
		if (cgr__shm_map(a.fd, 0, &c) != 0)
			_exit(2);
		if (memcmp(c.addr, "hello", 6) != 0)
			_exit(3);
		/* A peer cannot resize it either (SIGBUS in the parent). */
		if (ftruncate(c.fd, 0) == 0 || errno != EPERM)
			_exit(4);
		memcpy((char *)c.addr + 100, "child", 6);
		cgr__shm_close(&c);
		_exit(0);
	}
	waitpid(pid, &status, 0);
	t_ok(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	     "forked child maps and writes (status %d)", status);
	t_ok(memcmp((char *)b.addr + 100, "child", 6) == 0,
	     "the child's write is visible");

	cgr__shm_unmap(&a);
	t_ok(a.addr == NULL && a.fd >= 0, "unmap keeps the fd");
	cgr__shm_unmap(&a);
	t_is(cgr__shm_map(a.fd, 0, &junk), 0, "map again after unmap");
	t_ok(memcmp(junk.addr, "hello", 6) == 0, "... same contents");
	cgr__shm_close(&junk);
	cgr__shm_close(&a);
	t_is(a.fd, -1, "close clears the fd");
	cgr__shm_close(&a);
	cgr__shm_close(NULL);
	t_ok(memcmp(b.addr, "hello", 6) == 0,
	     "a mapping outlives the other's close");
	cgr__shm_close(&b);
	check_typed();
	check_handoff();
	return t_done();
}
