/*
 * tests/tap.h: the TAP helpers every test program shares (t_ prefix).
 *
 *   t_init(argc, argv, limit_s)  seeds from CGR_TEST_SEED or the clock (the
 *                                seed is printed), arms a hard time limit
 *                                (SIGALRM prints "Bail out!" and exits 1)
 *   t_plan(n), t_ok(cond, fmt, ...), t_is(a, b, fmt, ...), t_skip(why),
 *   t_skipf(fmt, ...)               a skip with its reason on the TAP line
 *   t_done()                     prints the plan if none and returns the
 *                                exit status
 *   t_scale(n)                   n divided by CGR_TEST_SCALE (sanitizer
 *                                runs set it), at least 1
 *   t_rand()                     xorshift64* from the printed seed
 */
#ifndef CGR_TEST_TAP_H
#define CGR_TEST_TAP_H

#include <dirent.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int t__n, t__failed, t__planned;
static uint64_t t__rng;
static unsigned t__limit;

static void t__alarm(int sig)
{
	static const char m[] = "Bail out! hard time limit reached\n";
	(void)sig;
	(void)!write(1, m, sizeof(m) - 1);
	_exit(1);
}

static inline uint64_t t_rand(void)
{
	uint64_t x = t__rng;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	t__rng = x;
	return x * 0x2545F4914F6CDD1DULL;
}

static inline void t_init(int argc, char **argv, unsigned limit_s)
{
	const char *s = getenv("CGR_TEST_SEED");
	uint64_t seed;

	(void)argc;
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (s != NULL && *s)
		seed = strtoull(s, NULL, 0);
	else
		seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
	if (seed == 0)
		seed = 1;
	t__rng = seed;
	printf("# %s: seed %" PRIu64 " (set CGR_TEST_SEED to repeat)\n",
	       argv[0], seed);
	t__limit = limit_s;
	signal(SIGALRM, t__alarm);
	alarm(limit_s);
}

/* CLOCK_MONOTONIC in ns (for reporting durations, never for waiting). */
static inline int64_t t_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline long t_scale(long n)
{
	const char *s = getenv("CGR_TEST_SCALE");
	long d = s != NULL ? atol(s) : 1;
	if (d < 1)
		d = 1;
	n /= d;
	return n < 1 ? 1 : n;
}

static inline void t_plan(int n)
{
	printf("1..%d\n", n);
	t__planned = 1;
}

static inline int t_vok(int cond, const char *fmt, va_list ap)
{
	t__n++;
	printf("%s %d - ", cond ? "ok" : "not ok", t__n);
	vprintf(fmt, ap);
	printf("\n");
	if (!cond)
		t__failed++;
	return cond;
}

static inline int t_ok(int cond, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static inline int t_ok(int cond, const char *fmt, ...)
{
	va_list ap;
	int r;
	va_start(ap, fmt);
	r = t_vok(cond, fmt, ap);
	va_end(ap);
	return r;
}

/* Integer equality with both values shown on failure. */
#define t_is(a, b, ...)                                                     \
	do {                                                                \
		long long t__a = (long long)(a), t__b = (long long)(b);     \
		if (!t_ok(t__a == t__b, __VA_ARGS__))                       \
			printf("#   got %lld, expected %lld\n", t__a, t__b);  \
	} while (0)

static inline void t_skip(const char *why)
{
	t__n++;
	printf("ok %d # SKIP %s\n", t__n, why);
}

/* A skip with its reason, formatted, on the TAP line itself. */
static inline void t_skipf(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));
static inline void t_skipf(const char *fmt, ...)
{
	va_list ap;
	t__n++;
	printf("ok %d # SKIP ", t__n);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
}

static inline void t_diag(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));
static inline void t_diag(const char *fmt, ...)
{
	va_list ap;
	printf("# ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
}

static inline int t_done(void)
{
	if (!t__planned)
		printf("1..%d\n", t__n);
	return t__failed ? 1 : 0;
}

/* Entries of a /proc directory (fds: /proc/self/fd, threads:
 * /proc/self/task), "." and ".." not counted; -1 if it cannot be read. */
static inline int t_count_dir(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	int n = 0;

	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL)
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

/* The name of thread tid (an entry of /proc/self/task) into comm (len
 * bytes, "" if it is gone): whether it could be read. */
static inline bool t_thread_comm(const char *tid, char *comm, size_t len)
{
	char path[300];
	FILE *f;
	bool ok;

	comm[0] = 0;
	snprintf(path, sizeof(path), "/proc/self/task/%s/comm", tid);
	if ((f = fopen(path, "r")) == NULL)
		return false;
	ok = fgets(comm, (int)len, f) != NULL;
	if (!ok)
		comm[0] = 0;
	fclose(f);
	return ok;
}

/* This process's threads but the kernel's io_uring workers ("iou-wrk-N",
 * "iou-sqp-N": io_uring starts them for some requests and ends them
 * after they idle, on its own time); -1 if /proc cannot be read. */
static inline int t_count_threads(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL) {
		char comm[32];
		if (e->d_name[0] == '.')
			continue;
		t_thread_comm(e->d_name, comm, sizeof(comm));
		n += strncmp(comm, "iou-", 4) != 0;
	}
	closedir(d);
	return n;
}

/* t_count_threads once it is want, or after 2 s: a thread that was
 * joined may still be listed for a moment (the kernel clears its id
 * before it takes it out of /proc). */
static inline int t_threads_back(int want)
{
	int n = t_count_threads();

	for (int i = 0; i < 200 && n != want; i++) {
		struct timespec ts = { 0, 10000000 };
		nanosleep(&ts, NULL);
		n = t_count_threads();
	}
	return n;
}

#endif
