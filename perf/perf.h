/*
 * perf/perf.h: what every perf program shares (perf_ prefix): common
 * options, CPU pinning, a cheap tick clock calibrated to nanoseconds,
 * medians, a spinning barrier that works between threads and between
 * processes (it may live in shared memory), and the one-JSON-object-per-
 * result line format.
 *
 * A result line is one JSON object with at least
 *   {"bench":..., "case":..., "impl":..., "metric":..., "value":...,
 * "unit":...} and whatever extra members the program adds.  Human tables go to
 * stdout as well; JSON lines start with '{' so `grep '^{'` separates them.
 */
#ifndef CGR_PERF_H
#define CGR_PERF_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* sched_setaffinity; include perf.h first */
#endif
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

/* ---- options ---- */

struct perf_opts {
	int windows; /* -w: measurement windows per implementation */
	long iters;  /* -n: iterations per window */
	int quick;   /* --quick: fewer windows and iterations */
	int json;    /* --json: JSON lines only, no table */
};

/*
 * Parses -w N, -n N, --quick, --json and -h into *o, which holds the
 * program's defaults on entry.  --quick divides iters by 10 and caps
 * windows at 3 unless -w/-n are given too.  Returns 0, or 1 after printing
 * usage (the caller exits with 2 on a bad option, 0 on -h).
 */
static inline int perf_parse(int argc, char **argv, struct perf_opts *o,
			     const char *what)
{
	int i, w = 0, n = 0;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-w") && i + 1 < argc) {
			o->windows = atoi(argv[++i]);
			w = 1;
		} else if (!strcmp(argv[i], "-n") && i + 1 < argc) {
			o->iters = atol(argv[++i]);
			n = 1;
		} else if (!strcmp(argv[i], "--quick")) {
			o->quick = 1;
		} else if (!strcmp(argv[i], "--json")) {
			o->json = 1;
		} else {
			fprintf(stderr,
				"usage: %s [-w windows] [-n iterations] "
				"[--quick] [--json]\n  %s\n",
				argv[0], what);
			return 1;
		}
	}
	if (o->quick && !w && o->windows > 3)
		o->windows = 3;
	if (o->quick && !n)
		o->iters = o->iters / 10 > 0 ? o->iters / 10 : 1;
	if (o->windows < 1)
		o->windows = 1;
	if (o->iters < 1)
		o->iters = 1;
	return 0;
}

/* ---- CPUs ---- */

/* Pins the calling thread to cpu.  0 or a negative errno. */
static inline int perf_pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(0, sizeof(set), &set) == 0 ? 0 : -errno;
}

/* Whether CPUs a and b are both usable by this process. */
static inline int perf_have_cpus(int a, int b)
{
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set) != 0)
		return 0;
	return CPU_ISSET(a, &set) && CPU_ISSET(b, &set);
}

static inline void perf_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	_mm_pause();
#else
	atomic_signal_fence(memory_order_seq_cst);
#endif
}

/* ---- clocks ---- */

static inline int64_t perf_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A cheap monotonic tick: the TSC on x86 (constant rate on every CPU this
 * runs on today), the clock elsewhere.  Convert with perf_tick_ns. */
static inline uint64_t perf_ticks(void)
{
#if defined(__x86_64__) || defined(__i386__)
	_mm_lfence();
	return __rdtsc();
#else
	return (uint64_t)perf_now_ns();
#endif
}

/* Nanoseconds per tick, measured against CLOCK_MONOTONIC over ~20 ms. */
static inline double perf_tick_ns(void)
{
#if defined(__x86_64__) || defined(__i386__)
	int64_t t0 = perf_now_ns(), t1;
	uint64_t k0 = perf_ticks(), k1;

	do
		t1 = perf_now_ns();
	while (t1 - t0 < 20000000);
	k1 = perf_ticks();
	return (double)(t1 - t0) / (double)(k1 - k0);
#else
	return 1.0;
#endif
}

/* ---- statistics ---- */

static inline int perf__cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Sorts v in place; returns the p-quantile (0..1) by nearest rank. */
static inline double perf_quantile(double *v, size_t n, double p)
{
	size_t i;

	if (n == 0)
		return 0;
	qsort(v, n, sizeof(*v), perf__cmp_double);
	i = (size_t)(p * (double)(n - 1) + 0.5);
	return v[i < n ? i : n - 1];
}

/* Median of n values (sorts v in place); the mean of the middle two for
 * even n. */
static inline double perf_median(double *v, size_t n)
{
	if (n == 0)
		return 0;
	qsort(v, n, sizeof(*v), perf__cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* ---- barrier ---- */

/* Spinning barrier; zero-initialised memory is a valid one.  May live in
 * memory shared between processes. */
struct perf_barrier {
	_Atomic uint32_t count;
	_Atomic uint32_t gen;
};

static inline void perf_barrier_wait(struct perf_barrier *b, uint32_t parties)
{
	uint32_t gen = atomic_load_explicit(&b->gen, memory_order_acquire);
	unsigned spins = 0;

	if (atomic_fetch_add_explicit(&b->count, 1, memory_order_acq_rel) ==
	    parties - 1) {
		atomic_store_explicit(&b->count, 0, memory_order_relaxed);
		atomic_fetch_add_explicit(&b->gen, 1, memory_order_release);
		return;
	}
	while (atomic_load_explicit(&b->gen, memory_order_acquire) == gen) {
		if (++spins % 4096 == 0)
			sched_yield(); /* more spinners than cores */
		else
			perf_relax();
	}
}

/* ---- output ---- */

/* Formats n doubles as a JSON array into buf ("[1.2,3.4]"). */
static inline const char *
perf_json_array(char *buf, size_t len, const double *v, size_t n, int decimals)
{
	size_t off = 0, i;

	off += (size_t)snprintf(buf + off, len - off, "[");
	for (i = 0; i < n && off < len; i++)
		off += (size_t)snprintf(buf + off, len - off, "%s%.*f",
					i ? "," : "", decimals, v[i]);
	if (off < len)
		snprintf(buf + off, len - off, "]");
	return buf;
}

/*
 * Prints one result line.  extra_fmt (may be NULL) formats further members,
 * without braces or a leading comma: "\"ratio_to_floor\":%.3f".
 */
static inline void perf_json(const char *bench, const char *case_,
			     const char *impl, const char *metric, double value,
			     const char *unit, const char *extra_fmt, ...)
    __attribute__((format(printf, 7, 8)));
static inline void perf_json(const char *bench, const char *case_,
			     const char *impl, const char *metric, double value,
			     const char *unit, const char *extra_fmt, ...)
{
	va_list ap;

	printf("{\"bench\":\"%s\",\"case\":\"%s\",\"impl\":\"%s\","
	       "\"metric\":\"%s\",\"value\":%.6g,\"unit\":\"%s\"",
	       bench, case_, impl, metric, value, unit);
	if (extra_fmt != NULL && *extra_fmt) {
		printf(",");
		va_start(ap, extra_fmt);
		vprintf(extra_fmt, ap);
		va_end(ap);
	}
	printf("}\n");
	fflush(stdout);
}

#endif
