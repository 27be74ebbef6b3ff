/*
 * tests/shm-boot.c: the rendezvous of a context with its worker processes
 * (shm/boot.h).  Three forked workers join in any order and each gets the
 * connection of its own rank (it answers with its rank over it); then
 * every way a rendezvous goes wrong fails it, saying what and who, before
 * the deadline, with every connection closed (descriptors back to start)
 * and the offending worker told why: a rank out of range, a rank taken
 * twice, another protocol version, a bad magic, a truncated hello, a
 * hello with descriptors, a peer that connects and says nothing, a rank
 * that never arrives; a join with nobody listening.
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "shm/boot.h"
#include "shm/shm.h"
#include "tap.h"

#define SEC 1000000000ll

static int fd_count(void)
{
	return t_count_dir("/proc/self/fd");
}

/* A worker: joins as rank, then sends its rank over the connection.
 * Exits 0 on a welcome, 3 on a refusal whose reason holds want. */
static pid_t worker(const char *addr, int rank, const char *want)
{
	pid_t pid = fork();

	if (pid == 0) {
		char why[300] = "";
		int n = 0, fd = cgr__boot_join(addr, rank, cgr__deadline(5 * SEC),
					       &n, why, sizeof(why));
		if (fd >= 0) {
			int32_t r = rank;
			_exit(cgr__shm_send(fd, &r, sizeof(r), NULL, 0) == 0 ?
				      0 :
				      2);
		}
		_exit(fd == -EPROTO && want != NULL && strstr(why, want) ? 3 :
									   4);
	}
	return pid;
}

static int reap(pid_t pid)
{
	int st = 0;
	waitpid(pid, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st);
}

static void check_join(void)
{
	struct cgr__boot b;
	char why[300] = "";
	pid_t pid[3];
	int ret, right = 0, fds0 = fd_count();

	t_is(cgr__boot_listen(&b, 0), -EINVAL, "no ranks");
	t_is(cgr__boot_listen(&b, 3), 0, "listen for 3 ranks at %s", b.addr);
	for (int i = 0; i < 3; i++)
		pid[i] = worker(b.addr, 2 - i, NULL); /* ranks 2, 1, 0 */
	ret = cgr__boot_accept(&b, cgr__deadline(10 * SEC), why, sizeof(why));
	t_is(ret, 0, "all 3 joined %s", why);
	for (int r = 0; ret == 0 && r < 3; r++) {
		int32_t got = -1;
		size_t n = 0, nf = 0;
		if (cgr__shm_recv(b.socks[r], &got, sizeof(got), &n, NULL, 0,
				  &nf, cgr__deadline(5 * SEC)) == 0)
			right += got == r && b.pids[r] == pid[2 - r];
	}
	t_is(right, 3, "each rank's connection and pid are its own");
	for (int i = 0; i < 3; i++)
		t_is(reap(pid[i]), 0, "worker %d welcomed", 2 - i);
	cgr__boot_close(&b);
	t_is(fd_count(), fds0, "closed: descriptors back to start");
}

/* Sends raw bytes (and maybe a descriptor) to addr as a hello, and keeps
 * the connection open until the context answered. */
static pid_t raw_peer(const char *addr, const void *msg, size_t len,
		      bool with_fd)
{
	pid_t pid = fork();

	if (pid == 0) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0), self = 0;
		char buf[512];
		memcpy(sa.sun_path + 1, addr, strlen(addr));
		if (connect(fd, (struct sockaddr *)&sa,
			    (socklen_t)(offsetof(struct sockaddr_un, sun_path) +
					1 + strlen(addr))) != 0)
			_exit(2);
		if (len > 0 &&
		    cgr__shm_send(fd, msg, len, &self, with_fd ? 1 : 0) != 0)
			_exit(2);
		/* The refusal, or the hang-up. */
		_exit(recv(fd, buf, sizeof(buf), 0) >= 0 ? 0 : 2);
	}
	return pid;
}

/* One rendezvous of 2 ranks where rank 0 joins properly and `bad` does
 * something wrong; the accept must fail with err and a reason holding
 * want.  bad: a pid from worker() or raw_peer(), started by start. */
struct bad_case {
	const char *what;
	int err;
	const char *want;
	int kind; /* 0 worker (rank, version patched), 1 raw bytes */
	int rank;
	size_t len;
	bool with_fd;
	uint32_t magic;
	uint16_t version;
	int64_t deadline_ns;
};

static void run_bad(const struct bad_case *k)
{
	struct cgr__boot b;
	struct cgr__boot_msg m;
	char why[300] = "";
	int fds0 = fd_count(), ret, st0, st1 = 0;
	pid_t p0, p1 = -1;
	int64_t t0;

	cgr__boot_listen(&b, 2);
	p0 = worker(b.addr, 0, NULL);
	memset(&m, 0, sizeof(m));
	m.magic = k->magic, m.version = k->version;
	m.type = CGR__BOOT_HELLO, m.rank = k->rank, m.pid = 1;
	if (k->kind == 0)
		p1 = worker(b.addr, k->rank, k->want);
	else if (k->kind == 1)
		p1 = raw_peer(b.addr, &m, k->len, k->with_fd);
	t0 = cgr__now_ns();
	ret = cgr__boot_accept(&b, cgr__deadline(k->deadline_ns), why,
			       sizeof(why));
	t_ok(ret == k->err && strstr(why, k->want) != NULL,
	     "%s: %s (%.0f ms)", k->what, why,
	     (double)(cgr__now_ns() - t0) / 1e6);
	st0 = reap(p0);
	if (p1 > 0)
		st1 = reap(p1);
	/* The good worker sees the context hang up (4), or was refused as
	 * a duplicate (3); the bad one was told why (3) or hung up on. */
	t_ok(st0 != 0 && st0 < 100 && st1 != 2 && st1 < 100 &&
		     fd_count() == fds0,
	     "...nobody welcomed, every descriptor closed (%d %d)", st0, st1);
}

static void check_bad(void)
{
	const size_t M = sizeof(struct cgr__boot_msg);
	const uint32_t G = CGR__BOOT_MAGIC;
	const uint16_t V = CGR__BOOT_VERSION;
	const struct bad_case cases[] = {
		{ "rank out of range", -EPROTO, "rank 7 out of range [0, 2)",
		  1, 7, M, false, G, V, 5 * SEC },
		{ "rank taken twice", -EPROTO, "rank 0 joined twice", 1, 0, M,
		  false, G, V, 5 * SEC },
		{ "another protocol version", -EPROTO,
		  "protocol version 9, this build speaks 1", 1, 1, M, false, G,
		  9, 5 * SEC },
		{ "bad magic", -EPROTO, "bad magic 0x0badf00d", 1, 1, M, false,
		  0x0badf00d, V, 5 * SEC },
		{ "truncated hello", -EPROTO, "a hello of 6 bytes", 1, 1, 6,
		  false, G, V, 5 * SEC },
		{ "a hello with a descriptor", -EPROTO, "with descriptors", 1,
		  1, M, true, G, V, 5 * SEC },
		{ "connects and says nothing", -ETIMEDOUT, "sent no hello", 1,
		  1, 0, false, G, V, SEC / 5 },
		{ "a rank that never arrives", -ETIMEDOUT,
		  "ranks 1 of 2 never arrived", 2, 1, 0, false, G, V, SEC / 5 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		run_bad(&cases[i]);
}

int main(int argc, char **argv)
{
	char why[300] = "";
	int n = 0;

	t_init(argc, argv, 60);
	check_join();
	check_bad();
	t_is(cgr__boot_join("cgr-boot-nobody", 0, cgr__deadline(SEC), &n, why,
			    sizeof(why)),
	     -ECONNREFUSED,
	     "join with nobody listening by the deadline: %s", why);
	return t_done();
}
