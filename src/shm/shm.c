/*
 * shm/shm.c: memfd-backed shared segments (see shm.h): create, map an
 * existing fd, unmap, close; typed sealed segments and their checks at
 * attach; descriptor hand-off over Unix sockets.  Every failure returns a
 * negative errno and leaves nothing open.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "shm/shm.h"

/* Every segment's seals (and F_SEAL_SEAL): its size is its size for
 * good. */
#define SEALS (F_SEAL_SHRINK | F_SEAL_GROW)

static size_t cgr__shm_page(void)
{
	long pg = sysconf(_SC_PAGESIZE);
	return pg > 0 ? (size_t)pg : 4096;
}

static int cgr__shm_mmap(int fd, size_t size, void **addr)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	*addr = p;
	return 0;
}

static int shm_make(const char *name, size_t size, unsigned flags,
		    struct cgr__shm *out)
{
	size_t pg = cgr__shm_page();
	void *addr = NULL;
	int fd, ret;

	if (out == NULL || size == 0 || size > SIZE_MAX - pg)
		return -EINVAL;
	size = CGR__ALIGN_UP(size, pg);
	fd = memfd_create(name != NULL ? name : "cgr",
			  flags | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	/* Sealed before it is mapped or handed to anyone: nobody can
	 * shrink it under another's mapping (SIGBUS there) or grow it. */
	if (ftruncate(fd, (off_t)size) != 0 ||
	    fcntl(fd, F_ADD_SEALS, SEALS | F_SEAL_SEAL) != 0) {
		ret = -errno;
		close(fd);
		return ret;
	}
	ret = cgr__shm_mmap(fd, size, &addr);
	if (ret < 0) {
		close(fd);
		return ret;
	}
	out->addr = addr;
	out->size = size;
	out->fd = fd;
	return 0;
}

int cgr__shm_create(const char *name, size_t size, struct cgr__shm *out)
{
	return shm_make(name, size, MFD_CLOEXEC, out);
}

int cgr__shm_map(int fd, size_t size, struct cgr__shm *out)
{
	struct stat st;
	void *addr = NULL;
	int dfd, ret;

	if (out == NULL || fd < 0)
		return -EINVAL;
	if (fstat(fd, &st) != 0)
		return -errno;
	if (st.st_size <= 0 || (size != 0 && size > (size_t)st.st_size))
		return -EINVAL;
	if (size == 0)
		size = (size_t)st.st_size;
	dfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (dfd < 0)
		return -errno;
	ret = cgr__shm_mmap(dfd, size, &addr);
	if (ret < 0) {
		close(dfd);
		return ret;
	}
	out->addr = addr;
	out->size = size;
	out->fd = dfd;
	return 0;
}

void cgr__shm_unmap(struct cgr__shm *s)
{
	if (s == NULL || s->addr == NULL)
		return;
	munmap(s->addr, s->size);
	s->addr = NULL;
}

void cgr__shm_close(struct cgr__shm *s)
{
	if (s == NULL)
		return;
	cgr__shm_unmap(s);
	if (s->fd >= 0)
		close(s->fd);
	s->fd = -1;
}

/* ---- typed segments ------------------------------------------------ */

int cgr__shm_create_typed(const char *name, size_t size, uint16_t kind,
			  const uint64_t geom[CGR__SHM_NGEOM],
			  struct cgr__shm *out)
{
	struct cgr__shm_hdr *h;
	struct cgr__shm s;
	int ret;

	if (out == NULL || kind == 0 || size == 0 ||
	    size > SIZE_MAX / 2 - sizeof(*h))
		return -EINVAL;
	ret = shm_make(name, sizeof(*h) + size, MFD_CLOEXEC, &s);
	if (ret < 0)
		return ret;
	h = s.addr;
	h->magic = CGR__SHM_MAGIC;
	h->version = CGR__SHM_VERSION;
	h->kind = kind;
	h->hdr_bytes = sizeof(*h);
	h->size = s.size;
	for (int i = 0; geom != NULL && i < CGR__SHM_NGEOM; i++)
		h->geom[i] = geom[i];
	*out = s;
	return 0;
}

static int refuse(char *why, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int refuse(char *why, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (why != NULL && len > 0) {
		va_start(ap, fmt);
		vsnprintf(why, len, fmt, ap);
		va_end(ap);
	}
	return -EPROTO;
}

/* What is wrong with header h of a file of fsize bytes, or 0. */
static int check_hdr(const struct cgr__shm_hdr *h, off_t fsize,
		     uint16_t kind, const uint64_t *geom, char *why,
		     size_t len)
{
	if (h->magic != CGR__SHM_MAGIC)
		return refuse(why, len, "bad magic 0x%08x", h->magic);
	if (h->version != CGR__SHM_VERSION)
		return refuse(why, len,
			      "layout version %u, this build reads %u",
			      h->version, CGR__SHM_VERSION);
	if (h->hdr_bytes != sizeof(*h))
		return refuse(why, len, "a header of %u bytes, expected %zu",
			      h->hdr_bytes, sizeof(*h));
	if (h->kind != kind)
		return refuse(why, len, "kind %u, expected %u", h->kind, kind);
	if (h->size != (uint64_t)fsize)
		return refuse(why, len,
			      "the header says %llu bytes, the file has %lld",
			      (unsigned long long)h->size, (long long)fsize);
	for (int i = 0; geom != NULL && i < CGR__SHM_NGEOM; i++)
		if (h->geom[i] != geom[i])
			return refuse(why, len,
				      "geometry word %d is %llu, expected %llu",
				      i, (unsigned long long)h->geom[i],
				      (unsigned long long)geom[i]);
	return 0;
}

int cgr__shm_attach(int fd, uint16_t kind, const uint64_t geom[CGR__SHM_NGEOM],
		    struct cgr__shm *out, char *why, size_t len)
{
	struct cgr__shm s;
	struct stat st;
	int seals, ret;

	if (out == NULL || fd < 0)
		return -EINVAL;
	if (fstat(fd, &st) != 0)
		return -errno;
	/* Sealed first: then the size checked is the size for good. */
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || (seals & SEALS) != SEALS)
		return refuse(why, len, "not sealed against resizing");
	if (st.st_size < (off_t)sizeof(struct cgr__shm_hdr))
		return refuse(why, len, "%lld bytes: smaller than a header",
			      (long long)st.st_size);
	ret = cgr__shm_map(fd, 0, &s);
	if (ret < 0)
		return ret;
	ret = check_hdr(s.addr, st.st_size, kind, geom, why, len);
	if (ret < 0) {
		cgr__shm_close(&s);
		return ret;
	}
	*out = s;
	return 0;
}

/* ---- hand-off ------------------------------------------------------ */

union fd_ctl {
	char buf[CMSG_SPACE(sizeof(int) * CGR__SHM_MAX_FDS)];
	struct cmsghdr align;
};

int cgr__shm_send(int sock, const void *msg, size_t len, const int *fds,
		  size_t nfds)
{
	struct iovec iov = { (void *)msg, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	union fd_ctl u;
	ssize_t n;

	if (msg == NULL || len == 0 || nfds > CGR__SHM_MAX_FDS ||
	    (nfds > 0 && fds == NULL))
		return -EINVAL;
	if (nfds > 0) {
		struct cmsghdr *c;
		memset(&u, 0, sizeof(u));
		mh.msg_control = u.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	do
		n = sendmsg(sock, &mh, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -EPROTO;
}

int cgr__fd_wait_either(int a, int b, int64_t deadline)
{
	struct pollfd pf[2] = { { .fd = a, .events = POLLIN },
				{ .fd = b, .events = POLLIN } };

	for (;;) {
		int64_t left = deadline - cgr__now_ns();
		int ms, r;
		/* Past the deadline, one look still: what is already there
		 * counts. */
		ms = left <= 0 ? 0 :
		     left / 1000000 >= INT_MAX ?
				 INT_MAX :
				 (int)((left + 999999) / 1000000);
		r = poll(pf, b >= 0 ? 2 : 1, ms);
		if (r > 0)
			return pf[0].revents ? 0 : 1;
		if (r < 0 && errno != EINTR)
			return -errno;
		if (r == 0 && left <= 0)
			return -ETIMEDOUT;
	}
}

int cgr__fd_wait_readable(int sock, int64_t deadline)
{
	int ret = cgr__fd_wait_either(sock, -1, deadline);
	return ret > 0 ? 0 : ret;
}

/* Takes the descriptors of mh's rights into got (at most max; *ng of
 * them); whether mh carried nothing else. */
static bool take_fds(struct msghdr *mh, int *got, size_t max, size_t *ng)
{
	bool plain = true;

	*ng = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c != NULL;
	     c = CMSG_NXTHDR(mh, c)) {
		size_t k;
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
		    c->cmsg_len < CMSG_LEN(0)) {
			plain = false;
			continue;
		}
		k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(fd));
			if (*ng < max) {
				got[(*ng)++] = fd;
			} else {
				close(fd);
				plain = false;
			}
		}
	}
	return plain;
}

int cgr__shm_recv(int sock, void *msg, size_t cap, size_t *len, int *fds,
		  size_t maxfds, size_t *nfds, int64_t deadline)
{
	int got[CGR__SHM_MAX_FDS];
	struct iovec iov = { msg, cap };
	struct msghdr mh;
	union fd_ctl u;
	size_t ng;
	ssize_t n;
	bool plain;
	int ret;

	if (msg == NULL || cap == 0 || len == NULL || nfds == NULL ||
	    (maxfds > 0 && fds == NULL))
		return -EINVAL;
	do {
		if ((ret = cgr__fd_wait_readable(sock, deadline)) < 0)
			return ret;
		memset(&mh, 0, sizeof(mh));
		mh.msg_iov = &iov;
		mh.msg_iovlen = 1;
		mh.msg_control = u.buf;
		mh.msg_controllen = sizeof(u.buf);
		n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	} while (n < 0 && (errno == EAGAIN || errno == EINTR));
	if (n < 0)
		return -errno;
	plain = take_fds(&mh, got, CGR__SHM_MAX_FDS, &ng);
	if (n == 0 && ng == 0)
		return -ECONNRESET;
	if (!plain || ng > maxfds || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
		for (size_t i = 0; i < ng; i++)
			close(got[i]);
		if (plain && (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) ==
				     MSG_CTRUNC) {
			/* Whole, but its descriptors are lost: our limit. */
			*len = (size_t)n;
			*nfds = 0;
			return -EMFILE;
		}
		return -EPROTO;
	}
	if (ng > 0)
		memcpy(fds, got, ng * sizeof(int));
	*len = (size_t)n;
	*nfds = ng;
	return 0;
}
