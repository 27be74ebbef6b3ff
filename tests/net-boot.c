/*
 * tests/net-boot.c: one rank of the PMIx bootstrap check
 * (tests/net-hosts.sh launches three, one per network namespace, with
 * mpirun).  Each rank publishes its host name, rank 0 also a 128-byte
 * stand-in for an NCCL unique id; after the fence each rank reads every
 * rank's host and rank 0's id and prints one line for the script to
 * judge:
 *   rank R size S host H hosts A,B,C id HASH len N fence_us T
 * Run alone (no launcher) it prints "no-launcher: <why>" and exits 3;
 * in a build without PMIx, "no-pmix: <why>" and exits 4.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "net/net.h"

static long long now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static unsigned long long fnv(const unsigned char *p, size_t n)
{
	unsigned long long h = 1469598103934665603ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return h;
}

int main(void)
{
	struct cgr__boot b;
	char why[256], host[64], hosts[512] = "", peer[64];
	unsigned char id[128], got[128];
	size_t len = 0, off = 0;
	long long t0;
	int ret = cgr__boot_init(&b, why, sizeof(why));

	if (ret == -ENOSYS) {
		printf("no-pmix: %s\n", why);
		return 4;
	}
	if (ret < 0) {
		printf("no-launcher: %s\n", why);
		return 3;
	}
	gethostname(host, sizeof(host));
	host[sizeof(host) - 1] = 0;
	ret = cgr__boot_put(&b, "cgr.host", host, strlen(host) + 1, why,
			    sizeof(why));
	if (ret == 0 && b.rank == 0) {
		/* A deterministic stand-in id: its bytes from the job name. */
		for (size_t i = 0; i < sizeof(id); i++)
			id[i] = (unsigned char)(b.nspace[i % 8] * 31 + i * 7);
		ret = cgr__boot_put(&b, "cgr.ncclid", id, sizeof(id), why,
				    sizeof(why));
	}
	t0 = now_us();
	if (ret == 0)
		ret = cgr__boot_fence(&b, 20, why, sizeof(why));
	t0 = now_us() - t0;
	for (uint32_t r = 0; ret == 0 && r < b.size; r++) {
		ret = cgr__boot_get(&b, r, "cgr.host", peer, sizeof(peer),
				    &len, why, sizeof(why));
		if (ret == 0 && (len == 0 || peer[len - 1] != 0))
			ret = -EPROTO;
		if (ret == 0)
			off += (size_t)snprintf(hosts + off, sizeof(hosts) - off,
						"%s%s", r ? "," : "", peer);
	}
	if (ret == 0)
		ret = cgr__boot_get(&b, 0, "cgr.ncclid", got, sizeof(got), &len,
				    why, sizeof(why));
	if (ret != 0) {
		printf("rank %u error %d: %s\n", b.rank, ret, why);
		cgr__boot_fini(&b);
		return 1;
	}
	printf("rank %u size %u host %s hosts %s id %016llx len %zu fence_us "
	       "%lld\n",
	       b.rank, b.size, host, hosts, fnv(got, len), len, t0);
	fflush(stdout);
	cgr__boot_fini(&b);
	return 0;
}
