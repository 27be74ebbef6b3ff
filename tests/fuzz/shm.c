/*
 * tests/fuzz/shm.c: the checks cgr__shm_attach makes before it reads a
 * typed segment another process made (shm/shm.c): seals, the file's size
 * against the header, magic, version, kind, geometry.  The input is the
 * file (its header and what follows, its size, its seals) and what the
 * attaching side expects.  Attach either refuses (-EPROTO with a reason,
 * or an errno) leaving no descriptor open, or maps a segment whose header
 * says what was expected and whose every page is there to read.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shm/shm.h"
#include "fuzz.h"

/* The lowest free descriptor (a leak moves it). */
static int lowest_fd(void)
{
	int fd = dup(0);

	fz_assert(fd >= 0);
	close(fd);
	return fd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz f = { data, size };
	uint8_t flags = fz_u8(&f);
	uint16_t kind = fz_u16(&f);
	uint64_t geom[CGR__SHM_NGEOM];
	size_t extra = fz_u16(&f) % 8192, len;
	struct cgr__shm s;
	char why[160];
	int fd, ret, low = lowest_fd(), seals = 0;
	volatile unsigned char sink = 0;

	for (int i = 0; i < CGR__SHM_NGEOM; i++)
		geom[i] = (flags & 4) ? fz_u64(&f) : 0;
	len = f.n;
	fd = memfd_create("cgr-fuzz", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	fz_assert(fd >= 0);
	fz_assert(len == 0 || write(fd, f.p, len) == (ssize_t)len);
	if (flags & 8)
		fz_assert(ftruncate(fd, (off_t)(len + extra)) == 0);
	if (flags & 1)
		seals |= F_SEAL_SHRINK;
	if (flags & 2)
		seals |= F_SEAL_GROW;
	if (seals != 0)
		fz_assert(fcntl(fd, F_ADD_SEALS, seals) == 0);
	why[0] = 0;
	ret = cgr__shm_attach(fd, kind, (flags & 4) ? geom : NULL, &s, why,
			      sizeof(why));
	if (ret == 0) {
		const struct cgr__shm_hdr *h = s.addr;
		off_t fsize = lseek(fd, 0, SEEK_END);
		fz_assert((flags & 3) == 3);
		fz_assert(s.size == (size_t)fsize && s.size >= sizeof(*h));
		fz_assert(h->magic == CGR__SHM_MAGIC &&
			  h->version == CGR__SHM_VERSION && h->kind == kind &&
			  h->hdr_bytes == sizeof(*h) && h->size == s.size);
		for (int i = 0; (flags & 4) && i < CGR__SHM_NGEOM; i++)
			fz_assert(h->geom[i] == geom[i]);
		for (size_t off = 0; off < s.size; off += 4096)
			sink += ((const unsigned char *)s.addr)[off];
		sink += ((const unsigned char *)s.addr)[s.size - 1];
		cgr__shm_close(&s);
	} else {
		fz_assert(ret < 0);
		if (ret == -EPROTO)
			fz_assert(why[0] != 0 && memchr(why, 0, sizeof(why)));
	}
	close(fd);
	fz_assert(lowest_fd() == low);
	return 0;
}

/* Seeds: segments cgr made, as the attaching side expects them, and
 * with one thing wrong each. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *dir = getenv("CGR_FUZZ_SEEDS");
	const uint64_t geom[CGR__SHM_NGEOM] = { 1, 2, 3, 4096, 5 };
	struct cgr__shm s;
	uint8_t buf[5 + 8 * CGR__SHM_NGEOM + 8192];
	char name[64];

	(void)argc, (void)argv;
	if (dir == NULL || !*dir)
		return 0;
	for (int k = 0; k < 6; k++) {
		size_t n = 0, body = k == 1 ? 5000 : 100;
		fz_assert(cgr__shm_create_typed("seed", body, 3, geom, &s) == 0);
		buf[n++] = k == 2 ? 5 : k == 3 ? 7 : 15; /* seals, geom */
		buf[n++] = k == 4 ? 4 : 3, buf[n++] = 0; /* kind */
		buf[n++] = 0, buf[n++] = 0;		 /* extra */
		for (int i = 0; i < CGR__SHM_NGEOM; i++)
			for (int b = 0; b < 8; b++)
				buf[n++] = (uint8_t)(geom[i] >> (8 * b));
		fz_assert(n + s.size <= sizeof(buf));
		memcpy(buf + n, s.addr, s.size);
		if (k == 5)
			buf[n + 16] ^= 1; /* the size in the header */
		n += s.size;
		cgr__shm_close(&s);
		snprintf(name, sizeof(name), "seg-%02d", k);
		fz_seed_write(dir, name, buf, n);
	}
	exit(0);
}
