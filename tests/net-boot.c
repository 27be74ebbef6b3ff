/*
 * tests/net-boot.c: one rank of the PMIx bootstrap check
 * (tests/net-hosts.sh launches three, one per network namespace, with
 * mpirun).  Each rank publishes its host name, rank 0 also a 128-byte
 * stand-in for an NCCL unique id; after the fence each rank reads every
 * rank's host and rank 0's id and prints one line for the script to
 * judge:
 *   rank R size S host H hosts A,B,C id HASH len N fence_us T
 * Then over UCX (the workers' addresses exchanged the same way): each
 * rank sends MSGS messages of varied sizes and one of 4 MiB (UCX's
 * rendezvous) to the next rank and checks, byte by byte and in order,
 * what the previous one sent it; ranks 0 and 1 then time a ping-pong:
 *   tls R UCX_TLS=... (left out: ...); resources: ...
 *   ucx R msgs N big OK rtt_p50_us X
 * (or "ucx R skipped: why" in a build without UCX).
 * Run alone (no launcher) it prints "no-launcher: <why>" and exits 3;
 * in a build without PMIx, "no-pmix: <why>" and exits 4.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <stdlib.h>

#include "net/net.h"

#define MSGS 500
#define BIG (4u << 20)
#define SEC 1000000000ll

/* Byte i of message k from rank r (a deterministic pattern). */
static unsigned char pat(uint32_t r, uint32_t k, size_t i)
{
	return (unsigned char)(r * 131 + k * 17 + i * 7 + (i >> 8));
}

/* Size of message k (0 .. ~70 KiB: eager and rendezvous both). */
static size_t msg_len(uint32_t k)
{
	return k % 50 == 49 ? 65536 + k : (size_t)(k * 37) % 3000;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* The UCX part: 0, or a line saying what failed. */
static int ucx_part(struct cgr__boot *b, char *line, size_t ll)
{
	struct cgr__ucx *u = NULL;
	char why[256] = "";
	unsigned char *buf = malloc(BIG), *addr = malloc(4096);
	const void *mine;
	size_t mlen, len, bad = 0;
	uint32_t next = (b->rank + 1) % b->size, prev, from;
	double rtt[200];
	int ret;

	prev = (b->rank + b->size - 1) % b->size;
	ret = cgr__ucx_open(&u, b->size, why, sizeof(why));
	if (ret == -ENOSYS) {
		snprintf(line, ll, "ucx %u skipped: %s", b->rank, why);
		free(buf), free(addr);
		return 0;
	}
	if (ret == 0) {
		printf("tls %u %s\n", b->rank, cgr__ucx_transports(u));
		fflush(stdout);
	}
	if (ret == 0)
		ret = cgr__ucx_address(u, &mine, &mlen);
	if (ret == 0)
		ret = cgr__boot_put(b, "cgr.ucx", mine, mlen, why, sizeof(why));
	if (ret == 0)
		ret = cgr__boot_fence(b, 20, why, sizeof(why));
	for (uint32_t r = 0; ret == 0 && r < b->size; r++) {
		if (r == b->rank)
			continue;
		ret = cgr__boot_get(b, r, "cgr.ucx", addr, 4096, &len, why,
				    sizeof(why));
		if (ret == 0)
			ret = cgr__ucx_connect(u, r, addr, len, why,
					       sizeof(why));
	}
	/* Sends interleaved with receives: every rank sends and receives
	 * at once, and a send of a rendezvous message needs its peer's
	 * progress. */
	for (uint32_t k = 0; ret == 0 && k <= MSGS; k++) {
		size_t n = k == MSGS ? BIG : msg_len(k);
		for (size_t i = 0; i < n; i++)
			buf[i] = pat(b->rank, k, i);
		ret = cgr__ucx_send(u, next, b->rank, buf, n, 30 * SEC);
		if (ret == 0)
			ret = cgr__ucx_recv(u, &from, buf, BIG, &len,
					    30 * SEC);
		if (ret == 0 && (from != prev ||
				 len != (k == MSGS ? BIG : msg_len(k))))
			bad++;
		for (size_t i = 0; ret == 0 && i < len; i++)
			if (buf[i] != pat(prev, k, i)) {
				bad++;
				break;
			}
	}
	if (ret == 0)
		snprintf(why, sizeof(why), "%zu bad", bad);
	/* Ping-pong between ranks 0 and 1 (64 bytes). */
	for (int i = 0; ret == 0 && b->rank < 2 && b->size > 1 && i < 200;
	     i++) {
		int64_t t0;
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		t0 = (int64_t)ts.tv_sec * SEC + ts.tv_nsec;
		if (b->rank == 0) {
			ret = cgr__ucx_send(u, 1, 0, buf, 64, 10 * SEC);
			if (ret == 0)
				ret = cgr__ucx_recv(u, &from, buf, BIG, &len,
						    10 * SEC);
		} else {
			ret = cgr__ucx_recv(u, &from, buf, BIG, &len,
					    10 * SEC);
			if (ret == 0)
				ret = cgr__ucx_send(u, 0, 1, buf, 64, 10 * SEC);
		}
		clock_gettime(CLOCK_MONOTONIC, &ts);
		rtt[i] = (double)((int64_t)ts.tv_sec * SEC + ts.tv_nsec - t0) /
			 1e3;
	}
	/* Nobody closes before everybody is done with everybody. */
	if (ret == 0)
		ret = cgr__boot_fence(b, 20, why, sizeof(why));
	if (ret == 0) {
		double p50 = 0;
		if (b->rank < 2 && b->size > 1) {
			qsort(rtt, 200, sizeof(rtt[0]), cmp_d);
			p50 = rtt[100];
		}
		snprintf(line, ll, "ucx %u msgs %u big %s rtt_p50_us %.1f",
			 b->rank, MSGS, bad ? "BAD" : "OK", p50);
		ret = bad ? -EPROTO : 0;
	} else {
		snprintf(line, ll, "ucx %u error %d: %s", b->rank, ret, why);
	}
	cgr__ucx_close(u);
	free(buf), free(addr);
	return ret;
}

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

/* "tls": which UCX_TLS lists open a UCX context here (no launcher
 * needed): "tls LIST CODE" per list. */
static int tls_lists(void)
{
	/* ("^tcp" leaves shared memory and self on a host without RDMA,
	 * as the test hosts are.) */
	static const char *const lists[] = { "sm,self", "posix,sysv,self",
					     "tcp,self", "sm,tcp", "^tcp" };

	for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++) {
		struct cgr__ucx *u = NULL;
		char why[256] = "";
		int ret;
		setenv("UCX_TLS", lists[i], 1);
		ret = cgr__ucx_open(&u, 1, why, sizeof(why));
		printf("tls %s %d %s\n", lists[i], ret, why);
		if (ret == 0)
			cgr__ucx_close(u);
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct cgr__boot b;
	char why[256], host[64], hosts[512] = "", peer[64];
	unsigned char id[128], got[128];
	size_t len = 0, off = 0;
	long long t0;
	int ret;

	if (argc > 1 && strcmp(argv[1], "tls") == 0)
		return tls_lists();
	ret = cgr__boot_init(&b, why, sizeof(why));
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
		(void)cgr__boot_fini(&b, 0, NULL);
		return 1;
	}
	printf("rank %u size %u host %s hosts %s id %016llx len %zu fence_us "
	       "%lld\n",
	       b.rank, b.size, host, hosts, fnv(got, len), len, t0);
	fflush(stdout);
	ret = ucx_part(&b, why, sizeof(why));
	printf("%s\n", why);
	fflush(stdout);
	(void)cgr__boot_fini(&b, 0, NULL);
	return ret == 0 ? 0 : 1;
}
