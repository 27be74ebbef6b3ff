/*
 * shm/shm.c: memfd-backed shared segments (see shm.h): create, map an
 * existing fd, unmap, close.  Every failure returns a negative errno and
 * leaves nothing open.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "shm/shm.h"

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

int cgr__shm_create(const char *name, size_t size, struct cgr__shm *out)
{
	size_t pg = cgr__shm_page();
	void *addr = NULL;
	int fd, ret;

	if (out == NULL || size == 0 || size > SIZE_MAX - pg)
		return -EINVAL;
	size = CGR__ALIGN_UP(size, pg);
	fd = memfd_create(name != NULL ? name : "cgr", MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) != 0) {
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
