/*
 * base/base.h: what every layer of cgr uses: branch hints, cache-line
 * layout, the monotonic clock, spinning, and the internal log call.
 * Nothing here allocates or owns state.
 */
#ifndef CGR_BASE_H
#define CGR_BASE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "cgr.h"

#define CGR__CACHELINE 64
#define cgr__likely(x) __builtin_expect(!!(x), 1)
#define cgr__unlikely(x) __builtin_expect(!!(x), 0)
#define cgr__aligned __attribute__((aligned(CGR__CACHELINE)))
#define CGR__ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define CGR__ALIGN_UP(x, a) (((x) + ((a) - 1)) & ~((size_t)(a) - 1))

/*
 * ThreadSanitizer cannot see a happens-before edge that runs through
 * another process (a thread here writes a ring a worker process reads,
 * which writes a ring the driver reads).  Graphs with process workers
 * make that edge explicit on one address per graph in TSan builds: every
 * publication to a channel releases it, every arrival acquires it.
 */
#if defined(__SANITIZE_THREAD__)
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define cgr__xproc_acquire(p) __tsan_acquire((void *)(p))
#define cgr__xproc_release(p) __tsan_release((void *)(p))
#else
#define cgr__xproc_acquire(p) ((void)(p))
#define cgr__xproc_release(p) ((void)(p))
#endif

/* Reads the caller's params struct of any older, smaller size safely. */
#define CGR__PARAMS_COPY(dst, src, init)                                    \
	do {                                                                \
		__typeof__(dst) cgr__d = init;                              \
		if ((src) != NULL) {                                        \
			size_t cgr__n = (src)->size < sizeof(cgr__d) ?      \
					      (src)->size :                 \
					      sizeof(cgr__d);               \
			memcpy(&cgr__d, (src), cgr__n);                     \
			cgr__d.size = sizeof(cgr__d);                       \
		}                                                           \
		(dst) = cgr__d;                                             \
	} while (0)

static inline int64_t cgr__now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* now + timeout, saturating; CGR_FOREVER stays CGR_FOREVER. */
static inline int64_t cgr__deadline(int64_t timeout_ns)
{
	if (timeout_ns >= CGR_FOREVER / 2)
		return CGR_FOREVER;
	if (timeout_ns < 0)
		timeout_ns = 0;
	return cgr__now_ns() + timeout_ns;
}

static inline void cgr__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#else
	atomic_signal_fence(memory_order_seq_cst);
#endif
}

/* Logging: a context owns one logger; every layer logs through it. */
struct cgr__logger {
	cgr_log_fn fn;
	void *arg;
	int level;
};

void cgr__log(const struct cgr__logger *lg, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#define cgr__err(lg, ...) cgr__log((lg), CGR_LOG_ERROR, __VA_ARGS__)
#define cgr__warn(lg, ...) cgr__log((lg), CGR_LOG_WARN, __VA_ARGS__)
#define cgr__info(lg, ...) cgr__log((lg), CGR_LOG_INFO, __VA_ARGS__)

#endif
