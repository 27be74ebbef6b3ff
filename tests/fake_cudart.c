/*
 * tests/fake_cudart.c: a stand-in for libcudart, for testing the cuda
 * backend's own logic (loading, streams, events, priorities, error
 * mapping, the sticky error) on machines without a GPU.  It models the
 * runtime calls cgr uses with CUDA's documented semantics, on host
 * threads: a stream is an in-order executor thread, an event a (stream,
 * position) pair captured at record, cudaStreamWaitEvent a wait for that
 * position.  It proves nothing about real CUDA; scripts/gpu-check.sh runs
 * the same tests on a GPU.
 *
 * As CUDA may, it runs the host functions of all streams of a device on
 * one thread, one at a time: a stream reaching a host function hands it
 * to its device's host-function thread and waits for it to return (so a
 * host function that blocks on another stream's progress stalls every
 * stream of the device, as it can on CUDA).  The exception: the NCCL
 * model (tests/fake_nccl.c) launches its "kernels" as host functions;
 * those (a function whose code is in libfakenccl) run on the stream's
 * own thread, as kernels do not wait for host functions.  So do all host
 * functions with FAKE_CUDA_HOSTFN=stream in the environment, for tests
 * whose host functions stand for kernels (tests/graph-overlap).  cuStreamWaitValue32 (from
 * cudaGetDriverEntryPoint[ByVersion]) is a wait on a host word, polled by
 * the stream's thread until the condition holds or the device fails;
 * cudaHostAlloc'd memory is its own device address (unified addressing).
 *
 * Test hooks: fake_cuda_fail(err) makes every later query and launch
 * return err (as a sticky error does); fake_cuda_fail_device(dev, err)
 * does so for the streams and calls of device dev only (sticky until
 * called again with 0; the other devices keep working);
 * fake_cuda_no_memops(mode) makes cuStreamWaitValue32 unavailable (1: the
 * entry point is not found; 2: the call returns CUDA_ERROR_NOT_SUPPORTED;
 * 0: available); fake_cuda_host_allocs() counts live cudaHostAlloc
 * blocks; fake_cuda_calls() counts calls.  A call from a child process
 * after the parent used the fake returns cudaErrorInitializationError,
 * as CUDA does after fork.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#define FQ 4096
#define FDEVS 16 /* devices modelled (FAKE_CUDA_NDEV at most this) */

struct fop {
	int kind; /* 1 host fn, 2 copy, 3 wait, 4 memset, 5 wait on word */
	cudaHostFn_t fn;
	void *arg;
	void *dst;
	const void *src;
	size_t n;
	struct CUstream_st *t; /* wait: until t passed pos */
	uint64_t pos;
	int value; /* memset */
	_Atomic uint32_t *word; /* wait on word: until word >= value */
	uint32_t wvalue;
	int dev;	/* the stream's device */
	bool kernel;	/* host fn: an NCCL model's kernel */
	unsigned epoch; /* fake_epoch when it was enqueued */
	unsigned depoch; /* its device's epoch then */
};

struct CUstream_st {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct fop q[FQ];
	uint64_t enq, done;
	bool dying;
	int prio;
	int dev; /* the device current when it was created */
	int refs; /* its thread, events recorded on it, waits for it */
	pthread_t th;
};

struct CUevent_st {
	pthread_mutex_t mu; /* CUDA events may be used from any thread */
	struct CUstream_st *s;
	uint64_t pos;
};

static _Atomic int fake_err;
static _Atomic long fake_ncalls;
/* The calling thread's device.  Static TLS (initial-exec): dlopen'ed
 * libraries' dynamic TLS blocks are malloc'd and freed by ld.so in ways
 * TSan does not follow (a false data race on reuse of a dead thread's
 * block). */
static __thread int fake_dev __attribute__((tls_model("initial-exec"))) = 0;

void fake_cuda_fail(int err);
void fake_cuda_fail_device(int dev, int err);
void fake_cuda_no_memops(int mode);
long fake_cuda_host_allocs(void);
long fake_cuda_calls(void);

/* Per device: its sticky error and epoch (as fake_err, fake_epoch), and
 * the one thread that runs its host functions. */
struct hreq {
	cudaHostFn_t fn;
	void *arg;
	bool done;
	struct hreq *next;
};

static struct fdev {
	_Atomic int err;
	_Atomic unsigned epoch;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool started;
	struct hreq *head, **tail;
} fake_devs[FDEVS];
static pthread_once_t fake_devs_once = PTHREAD_ONCE_INIT;
static bool fake_hostfn_on_stream; /* FAKE_CUDA_HOSTFN=stream */

static void fake_devs_init(void)
{
	const char *e = getenv("FAKE_CUDA_HOSTFN");

	fake_hostfn_on_stream = e != NULL && strcmp(e, "stream") == 0;
	for (int i = 0; i < FDEVS; i++) {
		pthread_mutex_init(&fake_devs[i].mu, NULL);
		pthread_cond_init(&fake_devs[i].cv, NULL);
		fake_devs[i].tail = &fake_devs[i].head;
	}
}

static struct fdev *fake_devp(int dev)
{
	pthread_once(&fake_devs_once, fake_devs_init);
	return &fake_devs[dev >= 0 && dev < FDEVS ? dev : 0];
}

/* A copy or memset in progress when the device fails finishes first: no
 * device write lands after a call has seen the failure (the caller may
 * then reuse the memory); later ones do not run, as on a dead device.
 * Work enqueued before a failure never runs, even once the model
 * "recovers" (fake_cuda_fail(0), for the next test): its epoch is over,
 * as a dead context's work is (its memory may be gone by then). */
static pthread_rwlock_t fake_dma = PTHREAD_RWLOCK_INITIALIZER;
static _Atomic unsigned fake_epoch;

void fake_cuda_fail(int err)
{
	pthread_rwlock_wrlock(&fake_dma);
	if (err != 0)
		atomic_fetch_add(&fake_epoch, 1);
	atomic_store(&fake_err, err);
	pthread_rwlock_unlock(&fake_dma);
}

void fake_cuda_fail_device(int dev, int err)
{
	struct fdev *d = fake_devp(dev);

	pthread_rwlock_wrlock(&fake_dma);
	if (err != 0)
		atomic_fetch_add(&d->epoch, 1);
	atomic_store(&d->err, err);
	pthread_rwlock_unlock(&fake_dma);
}

static _Atomic int fake_memops_off;

void fake_cuda_no_memops(int mode)
{
	atomic_store(&fake_memops_off, mode);
}

/* Whether op may run: the device alive, and alive since op came. */
static bool fake_live(const struct fop *op)
{
	struct fdev *d = fake_devp(op->dev);

	return atomic_load(&fake_err) == 0 &&
	       op->epoch == atomic_load(&fake_epoch) &&
	       atomic_load(&d->err) == 0 &&
	       op->depoch == atomic_load(&d->epoch);
}

static void fake_dma_op(const struct fop *op)
{
	pthread_rwlock_rdlock(&fake_dma);
	if (fake_live(op)) {
		if (op->kind == 2)
			memmove(op->dst, op->src, op->n);
		else
			memset(op->dst, op->value, op->n);
	}
	pthread_rwlock_unlock(&fake_dma);
}

long fake_cuda_calls(void)
{
	return atomic_load(&fake_ncalls);
}

/* The process that first used the fake: CUDA cannot be used in a child
 * forked after that (cudaErrorInitializationError). */
static _Atomic pid_t fake_pid;

static cudaError_t fake_enter(void)
{
	pid_t me = getpid(), first = 0;

	atomic_fetch_add(&fake_ncalls, 1);
	if (!atomic_compare_exchange_strong(&fake_pid, &first, me) &&
	    first != me)
		return cudaErrorInitializationError;
	return (cudaError_t)atomic_load(&fake_err);
}

/* fake_enter for a call on device dev (its sticky error too). */
static cudaError_t fake_enter_dev(int dev)
{
	cudaError_t e = fake_enter();

	if (e == cudaSuccess)
		e = (cudaError_t)atomic_load(&fake_devp(dev)->err);
	return e;
}

/* The device's host-function thread: runs queued requests in order. */
static void *fake_hostfn_main(void *arg)
{
	struct fdev *d = arg;

	pthread_mutex_lock(&d->mu);
	for (;;) {
		while (d->head == NULL)
			pthread_cond_wait(&d->cv, &d->mu);
		struct hreq *r = d->head;
		d->head = r->next;
		if (d->head == NULL)
			d->tail = &d->head;
		pthread_mutex_unlock(&d->mu);
		r->fn(r->arg);
		pthread_mutex_lock(&d->mu);
		r->done = true;
		pthread_cond_broadcast(&d->cv);
	}
	return NULL;
}

/* Runs fn(arg) on device dev's host-function thread; returns when done. */
static void fake_hostfn(int dev, cudaHostFn_t fn, void *arg)
{
	struct fdev *d = fake_devp(dev);
	struct hreq r = { .fn = fn, .arg = arg };
	pthread_t th;

	pthread_mutex_lock(&d->mu);
	if (!d->started &&
	    pthread_create(&th, NULL, fake_hostfn_main, d) == 0) {
		pthread_detach(th);
		d->started = true;
	}
	if (!d->started) { /* no thread: run it here */
		pthread_mutex_unlock(&d->mu);
		fn(arg);
		return;
	}
	*d->tail = &r;
	d->tail = &r.next;
	pthread_cond_broadcast(&d->cv);
	while (!r.done)
		pthread_cond_wait(&d->cv, &d->mu);
	pthread_mutex_unlock(&d->mu);
}

/* A device polling a host word (cuStreamWaitValue32, GEQ): until
 * (int32_t)(*word - value) >= 0 or the device fails. */
static void fake_wait_word(const struct fop *op)
{
	long nap = 1000;

	while (fake_live(op) &&
	       (int32_t)(atomic_load_explicit(op->word, memory_order_acquire) -
			 op->wvalue) < 0) {
		struct timespec ts = { 0, nap };
		nanosleep(&ts, NULL);
		if (nap < 50000)
			nap *= 2;
	}
}

static pthread_mutex_t fake_refs_mu = PTHREAD_MUTEX_INITIALIZER;

static void fake_ref(struct CUstream_st *s)
{
	pthread_mutex_lock(&fake_refs_mu);
	s->refs++;
	pthread_mutex_unlock(&fake_refs_mu);
}

static void fake_unref(struct CUstream_st *s)
{
	int left;

	if (s == NULL)
		return;
	pthread_mutex_lock(&fake_refs_mu);
	left = --s->refs;
	pthread_mutex_unlock(&fake_refs_mu);
	if (left == 0) {
		pthread_mutex_destroy(&s->mu);
		pthread_cond_destroy(&s->cv);
		free(s);
	}
}

static void *fake_main(void *arg)
{
	struct CUstream_st *s = arg;

	pthread_mutex_lock(&s->mu);
	for (;;) {
		while (s->done == s->enq && !s->dying)
			pthread_cond_wait(&s->cv, &s->mu);
		if (s->done == s->enq && s->dying)
			break;
		struct fop op = s->q[s->done % FQ];
		pthread_mutex_unlock(&s->mu);
		if (op.kind == 1) {
			if (fake_live(&op) && op.kernel)
				op.fn(op.arg);
			else if (fake_live(&op))
				fake_hostfn(op.dev, op.fn, op.arg);
		} else if (op.kind == 5) {
			fake_wait_word(&op);
		} else if (op.kind == 2 || op.kind == 4) {
			fake_dma_op(&op);
		} else if (op.kind == 3) {
			pthread_mutex_lock(&op.t->mu);
			while (op.t->done < op.pos)
				pthread_cond_wait(&op.t->cv, &op.t->mu);
			pthread_mutex_unlock(&op.t->mu);
			fake_unref(op.t);
		}
		pthread_mutex_lock(&s->mu);
		s->done++;
		pthread_cond_broadcast(&s->cv);
	}
	pthread_mutex_unlock(&s->mu);
	fake_unref(s);
	return NULL;
}

static cudaError_t fake_push(struct CUstream_st *s, const struct fop *op)
{
	pthread_mutex_lock(&s->mu);
	while (s->enq - s->done >= FQ)
		pthread_cond_wait(&s->cv, &s->mu);
	s->q[s->enq % FQ] = *op;
	s->q[s->enq % FQ].epoch = atomic_load(&fake_epoch);
	s->q[s->enq % FQ].dev = s->dev;
	s->q[s->enq % FQ].depoch = atomic_load(&fake_devp(s->dev)->epoch);
	s->enq++;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	return cudaSuccess;
}

/* The version reported: FAKE_CUDART_VERSION, else the header's. */
cudaError_t cudaRuntimeGetVersion(int *v)
{
	const char *e = getenv("FAKE_CUDART_VERSION");
	*v = e != NULL ? atoi(e) : CUDART_VERSION;
	return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int *n)
{
	const char *e = getenv("FAKE_CUDA_NDEV");
	cudaError_t err = fake_enter();

	if (err == cudaErrorInitializationError)
		return err;
	*n = e != NULL ? atoi(e) : 1;
	if (*n > FDEVS)
		*n = FDEVS;
	return cudaSuccess;
}

cudaError_t cudaSetDevice(int dev)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);

	if (e != cudaSuccess)
		return e;
	if (dev < 0 || dev >= n)
		return cudaErrorInvalidDevice;
	fake_dev = dev;
	return cudaSuccess;
}

cudaError_t cudaGetDevice(int *dev)
{
	fake_enter();
	*dev = fake_dev;
	return cudaSuccess;
}

/* "Device memory" is host memory, remembered so that pointer attributes
 * can tell it apart. */
#define FAKE_ALLOCS 4096
static struct {
	uintptr_t lo, hi;
	int dev;
} fake_allocs[FAKE_ALLOCS];
static pthread_mutex_t fake_alloc_mu = PTHREAD_MUTEX_INITIALIZER;

cudaError_t cudaMalloc(void **p, size_t n)
{
	cudaError_t e = fake_enter();
	int i;

	if (e != cudaSuccess)
		return e;
	if ((*p = calloc(1, n ? n : 1)) == NULL)
		return cudaErrorMemoryAllocation;
	pthread_mutex_lock(&fake_alloc_mu);
	for (i = 0; i < FAKE_ALLOCS && fake_allocs[i].lo != 0; i++)
		;
	if (i < FAKE_ALLOCS)
		fake_allocs[i].lo = (uintptr_t)*p,
		fake_allocs[i].hi = (uintptr_t)*p + (n ? n : 1),
		fake_allocs[i].dev = fake_dev;
	pthread_mutex_unlock(&fake_alloc_mu);
	return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
	fake_enter();
	if (p == NULL)
		return cudaSuccess;
	pthread_mutex_lock(&fake_alloc_mu);
	for (int i = 0; i < FAKE_ALLOCS; i++)
		if (fake_allocs[i].lo == (uintptr_t)p)
			fake_allocs[i].lo = fake_allocs[i].hi = 0;
	pthread_mutex_unlock(&fake_alloc_mu);
	free(p);
	return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n,
		       enum cudaMemcpyKind kind)
{
	cudaError_t e = fake_enter();

	if (e != cudaSuccess)
		return e;
	if (kind != cudaMemcpyDefault)
		return cudaErrorInvalidValue;
	memmove(dst, src, n);
	return cudaSuccess;
}

cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest)
{
	fake_enter();
	*least = 0;
	*greatest = -5;
	return cudaSuccess;
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t *out, unsigned flags,
					 int prio)
{
	struct CUstream_st *s;

	fake_enter();
	if (flags != cudaStreamNonBlocking || prio < -5 || prio > 0)
		return cudaErrorInvalidValue; /* cgr clamps and asks this */
	s = calloc(1, sizeof(*s));
	if (s == NULL)
		return cudaErrorMemoryAllocation;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	s->prio = prio;
	s->dev = fake_dev;
	s->refs = 1;
	if (pthread_create(&s->th, NULL, fake_main, s) != 0) {
		free(s);
		return cudaErrorMemoryAllocation;
	}
	pthread_detach(s->th);
	*out = s;
	return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
	fake_enter();
	/* As CUDA: returns at once, the work finishes, then it is freed. */
	pthread_mutex_lock(&s->mu);
	s->dying = true;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t s)
{
	cudaError_t e = fake_enter_dev(s->dev);
	bool idle;

	if (e != cudaSuccess)
		return e;
	pthread_mutex_lock(&s->mu);
	idle = s->done == s->enq;
	pthread_mutex_unlock(&s->mu);
	return idle ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *arg)
{
	struct fop op = { .kind = 1, .fn = fn, .arg = arg };
	cudaError_t e = fake_enter_dev(s->dev);
	Dl_info di;

	if (e != cudaSuccess)
		return e;
	pthread_once(&fake_devs_once, fake_devs_init);
	op.kernel = fake_hostfn_on_stream ||
		    (dladdr((void *)fn, &di) != 0 && di.dli_fname != NULL &&
		     strstr(di.dli_fname, "libfakenccl") != NULL);
	return fake_push(s, &op);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n,
			    enum cudaMemcpyKind kind, cudaStream_t s)
{
	struct fop op = { .kind = 2, .dst = dst, .src = src, .n = n };
	cudaError_t e = fake_enter_dev(s->dev);

	if (e != cudaSuccess)
		return e;
	if (kind != cudaMemcpyDefault)
		return cudaErrorInvalidValue;
	return fake_push(s, &op);
}

cudaError_t cudaMemsetAsync(void *dst, int value, size_t n, cudaStream_t s)
{
	struct fop op = { .kind = 4, .dst = dst, .n = n, .value = value };
	cudaError_t e = fake_enter_dev(s->dev);

	return e != cudaSuccess ? e : fake_push(s, &op);
}

cudaError_t cudaMallocHost(void **p, size_t n)
{
	cudaError_t e = fake_enter();

	if (e != cudaSuccess)
		return e;
	*p = malloc(n ? n : 1);
	return *p != NULL ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
	cudaError_t e = fake_enter_dev(s->dev);

	if (e != cudaSuccess)
		return e;
	pthread_mutex_lock(&s->mu);
	while (s->done != s->enq)
		pthread_cond_wait(&s->cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
	return fake_enter_dev(s->dev);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *out, unsigned flags)
{
	struct CUevent_st *e;

	fake_enter();
	if (flags != cudaEventDisableTiming)
		return cudaErrorInvalidValue; /* cgr asks for no timing */
	e = calloc(1, sizeof(*e));
	if (e == NULL)
		return cudaErrorMemoryAllocation;
	pthread_mutex_init(&e->mu, NULL);
	*out = e;
	return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
	fake_enter();
	fake_unref(e->s);
	pthread_mutex_destroy(&e->mu);
	free(e);
	return cudaSuccess;
}

/* A recorded event keeps its stream's counters alive (a reference), as a
 * CUDA event outlives the stream it was recorded on. */
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
	cudaError_t err = fake_enter_dev(s->dev);
	struct CUstream_st *old;

	if (err != cudaSuccess)
		return err;
	fake_ref(s);
	pthread_mutex_lock(&e->mu);
	old = e->s;
	pthread_mutex_lock(&s->mu);
	e->s = s;
	e->pos = s->enq;
	pthread_mutex_unlock(&s->mu);
	pthread_mutex_unlock(&e->mu);
	fake_unref(old);
	return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e)
{
	cudaError_t err = fake_enter();
	bool done = true; /* CUDA: never recorded counts as done */

	if (err != cudaSuccess)
		return err;
	pthread_mutex_lock(&e->mu);
	if (e->s != NULL)
		err = (cudaError_t)atomic_load(&fake_devp(e->s->dev)->err);
	if (e->s != NULL && err == cudaSuccess) {
		pthread_mutex_lock(&e->s->mu);
		done = e->s->done >= e->pos;
		pthread_mutex_unlock(&e->s->mu);
	}
	pthread_mutex_unlock(&e->mu);
	if (err != cudaSuccess)
		return err;
	return done ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned fl)
{
	struct fop op = { .kind = 3 };
	cudaError_t err = fake_enter_dev(s->dev);

	if (err != cudaSuccess)
		return err;
	if (fl != 0)
		return cudaErrorInvalidValue;
	pthread_mutex_lock(&e->mu);
	op.t = e->s;
	op.pos = e->pos;
	if (op.t != NULL && op.t != s)
		fake_ref(op.t);
	pthread_mutex_unlock(&e->mu);
	if (op.t == NULL || op.t == s)
		return cudaSuccess;
	return fake_push(s, &op);
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a,
				     const void *p)
{
	uintptr_t u = (uintptr_t)p;

	fake_enter();
	memset(a, 0, sizeof(*a));
	a->type = cudaMemoryTypeUnregistered;
	pthread_mutex_lock(&fake_alloc_mu);
	for (int i = 0; i < FAKE_ALLOCS; i++)
		if (u >= fake_allocs[i].lo && u < fake_allocs[i].hi) {
			a->type = cudaMemoryTypeDevice;
			a->device = fake_allocs[i].dev;
			a->devicePointer = (void *)p;
		}
	pthread_mutex_unlock(&fake_alloc_mu);
	return cudaSuccess;
}

const char *cudaGetErrorName(cudaError_t e)
{
	return e == cudaErrorIllegalAddress ? "cudaErrorIllegalAddress" :
	       e == cudaErrorNotReady	    ? "cudaErrorNotReady" :
					      "cudaError";
}

const char *cudaGetErrorString(cudaError_t e)
{
	return e == cudaErrorIllegalAddress ? "an illegal memory access was "
					      "encountered (fake)" :
					      "fake CUDA error";
}

/* ---- pinned memory and the driver's stream memory operations -------- */

#define FAKE_HOSTS 256
static void *fake_hosts[FAKE_HOSTS]; /* live cudaHostAlloc blocks */
static _Atomic long fake_nhosts;

long fake_cuda_host_allocs(void)
{
	return atomic_load(&fake_nhosts);
}

cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags)
{
	cudaError_t e = fake_enter_dev(fake_dev);
	int i;

	if (e != cudaSuccess)
		return e;
	if (flags & ~(unsigned)(cudaHostAllocPortable | cudaHostAllocMapped |
				cudaHostAllocWriteCombined))
		return cudaErrorInvalidValue;
	pthread_mutex_lock(&fake_alloc_mu);
	for (i = 0; i < FAKE_HOSTS && fake_hosts[i] != NULL; i++)
		;
	if (i == FAKE_HOSTS ||
	    (fake_hosts[i] = aligned_alloc(4096, (n + 4095) / 4096 * 4096)) ==
		    NULL) {
		pthread_mutex_unlock(&fake_alloc_mu);
		return cudaErrorMemoryAllocation;
	}
	memset(fake_hosts[i], 0xa5, n); /* not zeroed, as CUDA's */
	*p = fake_hosts[i];
	atomic_fetch_add(&fake_nhosts, 1);
	pthread_mutex_unlock(&fake_alloc_mu);
	return cudaSuccess;
}

/* cudaHostAlloc's blocks and cudaMallocHost's. */
cudaError_t cudaFreeHost(void *p)
{
	fake_enter();
	pthread_mutex_lock(&fake_alloc_mu);
	for (int i = 0; p != NULL && i < FAKE_HOSTS; i++)
		if (fake_hosts[i] == p) {
			fake_hosts[i] = NULL;
			atomic_fetch_sub(&fake_nhosts, 1);
		}
	pthread_mutex_unlock(&fake_alloc_mu);
	free(p);
	return cudaSuccess;
}

cudaError_t cudaHostGetDevicePointer(void **d, void *h, unsigned flags)
{
	cudaError_t e = fake_enter_dev(fake_dev);
	bool known = false;

	if (e != cudaSuccess)
		return e;
	if (flags != 0)
		return cudaErrorInvalidValue;
	pthread_mutex_lock(&fake_alloc_mu);
	for (int i = 0; i < FAKE_HOSTS; i++)
		known |= fake_hosts[i] != NULL &&
			 (uintptr_t)h - (uintptr_t)fake_hosts[i] < 4096;
	pthread_mutex_unlock(&fake_alloc_mu);
	if (!known)
		return cudaErrorInvalidValue;
	*d = h; /* unified addressing */
	return cudaSuccess;
}

static CUresult fake_wait_value32(CUstream s, CUdeviceptr addr,
				  cuuint32_t value, unsigned flags)
{
	struct fop op = { .kind = 5 };
	cudaError_t e = fake_enter_dev(s->dev);

	if (e != cudaSuccess)
		return (CUresult)e;
	if (atomic_load(&fake_memops_off) == 2)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (flags != CU_STREAM_WAIT_VALUE_GEQ || addr % 4 != 0)
		return CUDA_ERROR_INVALID_VALUE; /* cgr only asks this */
	op.word = (_Atomic uint32_t *)(uintptr_t)addr;
	op.wvalue = value;
	return (CUresult)fake_push(s, &op);
}

static cudaError_t fake_entry(const char *sym, void **fn,
			      enum cudaDriverEntryPointQueryResult *st)
{
	cudaError_t e = fake_enter();

	*fn = NULL;
	if (st != NULL)
		*st = cudaDriverEntryPointSymbolNotFound;
	if (e != cudaSuccess)
		return e;
	if (strcmp(sym, "cuStreamWaitValue32") != 0 ||
	    atomic_load(&fake_memops_off) == 1)
		return cudaSuccess;
	*fn = (void *)fake_wait_value32;
	if (st != NULL)
		*st = cudaDriverEntryPointSuccess;
	return cudaSuccess;
}

cudaError_t cudaGetDriverEntryPointByVersion(
	const char *sym, void **fn, unsigned ver, unsigned long long flags,
	enum cudaDriverEntryPointQueryResult *st)
{
	(void)flags;
	if (ver < 11030)
		return cudaErrorInvalidValue;
	return fake_entry(sym, fn, st);
}

cudaError_t cudaGetDriverEntryPoint(const char *sym, void **fn,
				    unsigned long long flags,
				    enum cudaDriverEntryPointQueryResult *st)
{
	(void)flags;
	return fake_entry(sym, fn, st);
}
