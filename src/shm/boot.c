/*
 * shm/boot.c: the rendezvous of a context with its worker processes (see
 * boot.h).  Messages go over SOCK_SEQPACKET, one struct cgr__boot_msg
 * each, through shm.c's hand-off (which refuses what does not fit).
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/base.h"
#include "shm/boot.h"
#include "shm/shm.h"

static _Atomic unsigned boot_seq;

static int fail(char *why, size_t len, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int fail(char *why, size_t len, int err, const char *fmt, ...)
{
	va_list ap;

	if (why != NULL && len > 0) {
		va_start(ap, fmt);
		vsnprintf(why, len, fmt, ap);
		va_end(ap);
	}
	return err;
}

/* The abstract address of name (sun_path starts with a NUL). */
static int addr_of(const char *name, struct sockaddr_un *sa, socklen_t *sl)
{
	size_t n = name != NULL ? strlen(name) : 0;

	if (n == 0 || n + 1 > sizeof(sa->sun_path))
		return -EINVAL;
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	memcpy(sa->sun_path + 1, name, n);
	*sl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
	return 0;
}

static void msg_init(struct cgr__boot_msg *m, int type, int rank)
{
	memset(m, 0, sizeof(*m));
	m->magic = CGR__BOOT_MAGIC;
	m->version = CGR__BOOT_VERSION;
	m->type = (uint16_t)type;
	m->rank = rank;
}

int cgr__boot_listen(struct cgr__boot *b, int nranks)
{
	return cgr__boot_listen_at(b, nranks, NULL);
}

int cgr__boot_listen_at(struct cgr__boot *b, int nranks, const char *addr)
{
	struct sockaddr_un sa;
	socklen_t sl;
	int fd, ret;

	if (b == NULL || nranks < 1 || nranks > CGR__BOOT_MAX_RANKS ||
	    (addr != NULL && strlen(addr) >= sizeof(b->addr)))
		return -EINVAL;
	memset(b, 0, sizeof(*b));
	b->lsock = -1;
	b->abort_fd = -1;
	b->nranks = nranks;
	for (int r = 0; r < CGR__BOOT_MAX_RANKS; r++)
		b->socks[r] = -1;
	if (addr != NULL)
		snprintf(b->addr, sizeof(b->addr), "%s", addr);
	else
		snprintf(b->addr, sizeof(b->addr), "cgr-boot-%ld-%u",
			 (long)getpid(), atomic_fetch_add(&boot_seq, 1));
	if ((ret = addr_of(b->addr, &sa, &sl)) < 0)
		return ret;
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sl) != 0 ||
	    listen(fd, nranks) != 0) {
		ret = -errno;
		close(fd);
		return ret;
	}
	b->lsock = fd;
	return 0;
}

/* What is wrong with hello m (n bytes), or 0. */
static int check_hello(const struct cgr__boot *b, const struct cgr__boot_msg *m,
		       size_t n, char *why, size_t len)
{
	if (n != sizeof(*m))
		return fail(why, len, -EPROTO,
			    "a hello of %zu bytes, expected %zu", n,
			    sizeof(*m));
	if (m->magic != CGR__BOOT_MAGIC)
		return fail(why, len, -EPROTO, "bad magic 0x%08x in a hello",
			    m->magic);
	if (m->version != CGR__BOOT_VERSION)
		return fail(why, len, -EPROTO,
			    "protocol version %u, this build speaks %u",
			    m->version, CGR__BOOT_VERSION);
	if (m->type != CGR__BOOT_HELLO)
		return fail(why, len, -EPROTO,
			    "message type %u where a hello was due", m->type);
	if (m->rank < 0 || m->rank >= b->nranks)
		return fail(why, len, -EPROTO, "rank %d out of range [0, %d)",
			    m->rank, b->nranks);
	if (b->socks[m->rank] >= 0)
		return fail(why, len, -EPROTO,
			    "rank %d joined twice (pids %lld and %lld)",
			    m->rank, (long long)b->pids[m->rank],
			    (long long)m->pid);
	return 0;
}

/* Tells the peer on c why it is turned away (best effort). */
static void refuse(int c, const char *why)
{
	struct cgr__boot_msg m;

	msg_init(&m, CGR__BOOT_REFUSE, -1);
	snprintf(m.why, sizeof(m.why), "%s", why != NULL ? why : "");
	cgr__shm_send(c, &m, sizeof(m), NULL, 0);
}

/* Connection c's hello: c becomes its rank's, or is closed. */
static int take_hello(struct cgr__boot *b, int c, int64_t deadline,
		      char *why, size_t len)
{
	struct cgr__boot_msg m;
	size_t n = 0, nf = 0;
	int ret = cgr__shm_recv(c, &m, sizeof(m), &n, NULL, 0, &nf, deadline);

	if (ret == -EPROTO)
		ret = fail(why, len, -EPROTO,
			   "a hello longer than %zu bytes, or with descriptors",
			   sizeof(m));
	else if (ret == -ETIMEDOUT)
		fail(why, len, ret,
		     "a worker connected but sent no hello by the deadline");
	else if (ret == -ECONNRESET)
		ret = fail(why, len, -EPROTO,
			   "a worker hung up before its hello");
	else if (ret == 0)
		ret = check_hello(b, &m, n, why, len);
	else
		fail(why, len, ret, "receiving a hello: %s", strerror(-ret));
	if (ret == -EPROTO)
		refuse(c, why);
	if (ret < 0) {
		close(c);
		return ret;
	}
	b->socks[m.rank] = c;
	b->pids[m.rank] = m.pid;
	return 0;
}

/* Names the ranks that never arrived. */
static int missing(const struct cgr__boot *b, char *why, size_t len)
{
	size_t off = 0;
	int k = 0;

	off = (size_t)snprintf(why, len, "ranks");
	for (int r = 0; r < b->nranks && off < len; r++)
		if (b->socks[r] < 0)
			off += (size_t)snprintf(why + off, len - off, "%s %d",
						k++ ? "," : "", r);
	if (off < len)
		snprintf(why + off, len - off, " of %d never arrived",
			 b->nranks);
	return -ETIMEDOUT;
}

static int welcome_all(struct cgr__boot *b, char *why, size_t len)
{
	struct cgr__boot_msg m;

	for (int r = 0; r < b->nranks; r++) {
		int ret;
		msg_init(&m, CGR__BOOT_WELCOME, r);
		m.nranks = b->nranks;
		ret = cgr__shm_send(b->socks[r], &m, sizeof(m), NULL, 0);
		if (ret < 0)
			return fail(why, len, ret,
				    "rank %d left before its welcome: %s", r,
				    strerror(-ret));
	}
	return 0;
}

static void close_socks(struct cgr__boot *b)
{
	for (int r = 0; r < CGR__BOOT_MAX_RANKS; r++) {
		if (b->socks[r] >= 0)
			close(b->socks[r]);
		b->socks[r] = -1;
	}
}

/* Until a connection waits (0), the abort fd is readable (-ECHILD) or
 * the deadline (-ETIMEDOUT). */
static int wait_conn(struct cgr__boot *b, int64_t deadline)
{
	int ret = cgr__fd_wait_either(b->lsock, b->abort_fd, deadline);
	return ret == 1 ? -ECHILD : ret;
}

int cgr__boot_accept(struct cgr__boot *b, int64_t deadline, char *why,
		     size_t len)
{
	int arrived = 0, ret = 0;

	if (b == NULL || b->lsock < 0)
		return -EINVAL;
	while (ret == 0 && arrived < b->nranks) {
		int c;
		ret = wait_conn(b, deadline);
		if (ret == -ECHILD)
			ret = fail(why, len, ret,
				   "the worker process exited before it "
				   "joined");
		if (ret == -ETIMEDOUT)
			ret = missing(b, why, len);
		if (ret < 0)
			break;
		c = accept4(b->lsock, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0) {
			if (errno != EINTR && errno != EAGAIN &&
			    errno != ECONNABORTED)
				ret = fail(why, len, -errno, "accept: %s",
					   strerror(errno));
			continue;
		}
		ret = take_hello(b, c, deadline, why, len);
		arrived += ret == 0;
	}
	close(b->lsock);
	b->lsock = -1;
	if (ret == 0)
		ret = welcome_all(b, why, len);
	if (ret < 0)
		close_socks(b);
	return ret;
}

int cgr__boot_accept_child(struct cgr__boot *b, int pidfd, int64_t pid,
			   int64_t deadline, char *why, size_t len)
{
	struct ucred cr;
	socklen_t cl = sizeof(cr);
	int ret;

	b->abort_fd = pidfd;
	ret = cgr__boot_accept(b, deadline, why, len);
	if (ret == 0 && (getsockopt(b->socks[0], SOL_SOCKET, SO_PEERCRED, &cr,
				    &cl) != 0 ||
			 (int64_t)cr.pid != pid)) {
		ret = fail(why, len, -EPROTO,
			   "the worker's connection came from pid %d, not "
			   "%lld",
			   (int)cr.pid, (long long)pid);
		close_socks(b);
	}
	return ret;
}

void cgr__boot_close(struct cgr__boot *b)
{
	if (b == NULL)
		return;
	if (b->lsock >= 0)
		close(b->lsock);
	b->lsock = -1;
	close_socks(b);
}

/* The context's answer m (n bytes) to rank's hello: 0 (welcome), or
 * -EPROTO with why. */
static int check_answer(const struct cgr__boot_msg *m, size_t n, int rank,
			int *nranks, char *why, size_t len)
{
	if (n != sizeof(*m) || m->magic != CGR__BOOT_MAGIC ||
	    m->version != CGR__BOOT_VERSION)
		return fail(why, len, -EPROTO,
			    "the context's answer is no cgr message of this "
			    "version (%zu bytes)",
			    n);
	if (m->type == CGR__BOOT_REFUSE)
		return fail(why, len, -EPROTO, "refused: %.*s",
			    (int)sizeof(m->why), m->why);
	if (m->type != CGR__BOOT_WELCOME || m->rank != rank ||
	    m->nranks < 1 || m->nranks > CGR__BOOT_MAX_RANKS)
		return fail(why, len, -EPROTO,
			    "a welcome for rank %d of %d, not for rank %d",
			    m->rank, m->nranks, rank);
	*nranks = m->nranks;
	return 0;
}

/* A connection to sa, retried while nobody listens there yet (a worker
 * started by something else may come first) until the deadline. */
static int connect_until(const struct sockaddr_un *sa, socklen_t sl,
			 int64_t deadline)
{
	for (;;) {
		int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		int err;
		if (fd < 0)
			return -errno;
		if (connect(fd, (const struct sockaddr *)sa, sl) == 0)
			return fd;
		err = errno;
		close(fd);
		if (err != ECONNREFUSED && err != ENOENT && err != EAGAIN)
			return -err;
		if (cgr__now_ns() >= deadline)
			return -ECONNREFUSED;
		struct timespec ts = { 0, 2000000 };
		nanosleep(&ts, NULL);
	}
}

int cgr__boot_join(const char *addr, int rank, int64_t deadline, int *nranks,
		   char *why, size_t len)
{
	struct cgr__boot_msg m;
	struct sockaddr_un sa;
	size_t n = 0, nf = 0;
	socklen_t sl;
	int fd, ret;

	if (nranks == NULL || (ret = addr_of(addr, &sa, &sl)) < 0)
		return -EINVAL;
	fd = connect_until(&sa, sl, deadline);
	if (fd < 0)
		return fail(why, len, fd, "connect to %s: %s", addr,
			    strerror(-fd));
	msg_init(&m, CGR__BOOT_HELLO, rank);
	m.pid = (int64_t)getpid();
	ret = cgr__shm_send(fd, &m, sizeof(m), NULL, 0);
	if (ret == 0)
		ret = cgr__shm_recv(fd, &m, sizeof(m), &n, NULL, 0, &nf,
				    deadline);
	if (ret == 0)
		ret = check_answer(&m, n, rank, nranks, why, len);
	else if (ret == -ECONNRESET)
		fail(why, len, ret, "the context hung up");
	else if (ret != -EPROTO || why == NULL || why[0] == 0)
		fail(why, len, ret, "%s", strerror(-ret));
	if (ret < 0) {
		close(fd);
		return ret;
	}
	return fd;
}
