/*
 * compile/shared.c: the shared segment of a graph with process workers.
 *
 * What the graph's runners share across processes (the run state block,
 * every port's slots and every channel's ring) is allocated from one
 * memfd segment instead of the arena.  The driver compiles first: its
 * segment grows as the compiler allocates (a large reservation of address
 * space, the file extended underneath, so nothing handed out moves), then
 * it is cut to size, given a typed header and sealed.  Each worker process
 * compiles the same graph again over the driver's segment (attach): the
 * compiler is deterministic, so the same allocations come at the same
 * offsets; every one is checked against the driver's size, and the totals
 * must agree, else the layouts differ and the compile fails.  Offsets and
 * plain data only live inside: each process maps the segment wherever its
 * kernel puts it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "compile/compile.h"

/* Address space the driver reserves for one graph's segment. */
#define SEG_RESERVE (64ull << 30)
#define SEG_MIN (16u << 20)
#define SEG_HDR CGR__ALIGN_UP(sizeof(struct cgr__shm_hdr), 64)

/* Reserves SEG_RESERVE of address space over fd, or under an address
 * space limit (RLIMIT_AS) half of the most it could get (the rest is
 * for the process), at least SEG_MIN: the base, NULL if not even that. */
static void *seg_reserve(int fd, size_t *got)
{
	for (size_t r = SEG_RESERVE; r >= SEG_MIN; r /= 2) {
		void *base = mmap(NULL, r, PROT_READ | PROT_WRITE,
				  MAP_SHARED | MAP_NORESERVE, fd, 0);
		if (base == MAP_FAILED)
			continue;
		if (r < SEG_RESERVE && r > SEG_MIN) {
			munmap((unsigned char *)base + r / 2, r / 2);
			r /= 2;
		}
		*got = r;
		return base;
	}
	return NULL;
}

int cgr__seg_create(struct cgr_compiled *c)
{
	struct cgr__gseg *s = cgr__alloc(&c->ctx->arena, sizeof(*s), 64);
	void *base;
	int fd;

	if (s == NULL)
		return -ENOMEM;
	memset(s, 0, sizeof(*s));
	s->shm.fd = -1;
	c->seg = s;
	fd = memfd_create("cgr-graph", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	s->shm.fd = fd;
	base = seg_reserve(fd, &s->reserve);
	if (base == NULL)
		return -ENOMEM;
	s->shm.addr = base;
	s->shm.size = s->reserve;
	s->used = SEG_HDR;
	return 0;
}

int cgr__seg_attach(struct cgr_compiled *c, int fd, char *why, size_t len)
{
	struct cgr__gseg *s = cgr__alloc(&c->ctx->arena, sizeof(*s), 64);
	const struct cgr__shm_hdr *h;
	int ret;

	if (s == NULL)
		return -ENOMEM;
	memset(s, 0, sizeof(*s));
	s->shm.fd = -1;
	c->seg = s;
	ret = cgr__shm_attach(fd, CGR__SHM_GRAPH, NULL, &s->shm, why, len);
	if (ret < 0) {
		s->shm.fd = -1;
		return ret;
	}
	h = s->shm.addr;
	/* geom: the driver's total, the blob's offset and length. */
	if (h->geom[0] < SEG_HDR || h->geom[0] > s->shm.size ||
	    h->geom[1] < h->geom[0] || h->geom[2] > s->shm.size - h->geom[1]) {
		snprintf(why, len,
			 "graph segment of %zu bytes says %llu used, a graph "
			 "of %llu bytes at %llu",
			 s->shm.size, (unsigned long long)h->geom[0],
			 (unsigned long long)h->geom[2],
			 (unsigned long long)h->geom[1]);
		return -EPROTO;
	}
	s->attach = true;
	s->total = h->geom[0];
	s->used = SEG_HDR;
	return 0;
}

void *cgr__c_salloc(struct cgr_compiled *c, size_t size)
{
	struct cgr__gseg *s = c->seg;
	size_t off, end;
	void *p;

	if (s == NULL)
		return cgr__c_alloc(c, size);
	off = CGR__ALIGN_UP(s->used, 64);
	if (size > SEG_RESERVE || (end = off + CGR__ALIGN_UP(size, 64)) < off ||
	    end > (s->attach ? s->total : s->reserve))
		return NULL;
	if (!s->attach && end > s->cap) {
		size_t cap = s->cap ? s->cap : (size_t)1 << 20;
		while (cap < end)
			cap *= 2;
		if (ftruncate(s->shm.fd, (off_t)cap) != 0)
			return NULL;
		s->cap = cap;
	}
	s->used = end;
	p = (unsigned char *)s->shm.addr + off;
	/* The driver's memory is fresh (zero); a worker process sees the
	 * driver's layout, which its compile writes again identically. */
	return p;
}

int cgr__seg_seal(struct cgr_compiled *c, const void *blob, size_t blen)
{
	struct cgr__gseg *s = c->seg;
	long pg = sysconf(_SC_PAGESIZE);
	size_t boff = CGR__ALIGN_UP(s->used, 64), size;
	struct cgr__shm_hdr *h = s->shm.addr;

	size = CGR__ALIGN_UP(boff + blen, (size_t)(pg > 0 ? pg : 4096));
	if (size > s->reserve)
		return -ENOMEM;
	if (ftruncate(s->shm.fd, (off_t)size) != 0)
		return -errno;
	s->cap = size;
	if (blen > 0)
		memcpy((unsigned char *)s->shm.addr + boff, blob, blen);
	h->magic = CGR__SHM_MAGIC;
	h->version = CGR__SHM_VERSION;
	h->kind = CGR__SHM_GRAPH;
	h->hdr_bytes = sizeof(*h);
	h->size = size;
	h->geom[0] = s->used;
	h->geom[1] = boff;
	h->geom[2] = blen;
	if (fcntl(s->shm.fd, F_ADD_SEALS,
		  F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
		return -errno;
	return 0;
}

const void *cgr__seg_blob(const struct cgr_compiled *c, size_t *len)
{
	const struct cgr__shm_hdr *h = c->seg->shm.addr;

	*len = h->geom[2];
	return (const unsigned char *)c->seg->shm.addr + h->geom[1];
}

int cgr__seg_check(const struct cgr_compiled *c, char *why, size_t len)
{
	const struct cgr__gseg *s = c->seg;

	if (s == NULL || !s->attach || s->used == s->total)
		return 0;
	snprintf(why, len,
		 "the graph's shared layout differs between the driver "
		 "(%zu bytes) and this worker (%zu bytes): not the same "
		 "build of cgr?",
		 s->total, s->used);
	return -EPROTO;
}

void cgr__seg_free(struct cgr_compiled *c)
{
	struct cgr__gseg *s = c->seg;

	if (s == NULL)
		return;
	if (s->shm.addr != NULL)
		munmap(s->shm.addr, s->shm.size);
	if (s->shm.fd >= 0)
		close(s->shm.fd);
	cgr__free(&c->ctx->arena, s, sizeof(*s), 64);
	c->seg = NULL;
}
