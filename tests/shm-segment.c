/*
 * tests/shm-segment.c: memfd segments: create (page rounding, zero fill),
 * a second mapping of the same fd at another address sees the same bytes,
 * a forked child maps it too, bad arguments, unmap/close idempotence.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shm/shm.h"
#include "tap.h"

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
	return t_done();
}
