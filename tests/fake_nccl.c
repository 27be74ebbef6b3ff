/*
 * tests/fake_nccl.c: a stand-in for libnccl, for testing cgr's NCCL
 * backend (comm/nccl_*.c) on machines without a GPU, over the model of the
 * CUDA runtime (tests/fake_cudart.c, whose "device memory" is host memory
 * and whose streams are threads).  It really performs every call cgr
 * uses: communicators from a unique id, nonblocking (init, group end and
 * finalize report ncclInProgress, ncclCommGetAsyncError settles them),
 * groups, the collectives, send and receive, each run in stream order by
 * a host function on the rank's stream that meets the other ranks'
 * (collective #k of every rank, or a send's matching receive).  It also
 * models what NCCL forbids, to catch cgr doing it: recording an event
 * before the communicator left ncclInProgress (the enqueue is deferred
 * until ncclCommGetAsyncError says ncclSuccess, so such an event passes
 * early), two threads in one communicator at once, ranks that disagree,
 * destroy without finalize or with work pending, two ranks of one
 * communicator on one device ("Duplicate GPU").  It proves nothing about
 * NCCL itself; scripts/gpu-check.sh runs against the real one.
 *
 * Test hooks: fake_nccl_fail(err) makes every communicator report err
 * asynchronously and stop progressing (as a network failure); calls
 * waiting in it return only at abort.  fake_nccl_fail_inflight(err) does
 * that to the communicators that have ranks inside a collective now
 * (others are untouched): they report err, those ranks keep waiting
 * (NCCL's kernels "never complete") until ncclCommAbort; it returns how
 * many it failed.  fake_nccl_hold(1) keeps every collective from
 * completing: its ranks wait inside it (all counted by
 * fake_nccl_waiting()) until fake_nccl_hold(0), an abort or a failure.
 * fake_nccl_inprogress(polls): group end reports ncclInProgress and
 * settles after that many polls (default 2; 0: ncclSuccess at once);
 * fake_nccl_init_polls(polls): a nonblocking init (ncclCommInitRankConfig
 * with blocking = 0, which returns ncclInProgress outside a group) stays
 * ncclInProgress for that many polls of ncclCommGetAsyncError once every
 * rank joined (default 2); fake_nccl_inprogress_polls() counts the polls
 * that answered ncclInProgress.  fake_nccl_misuse() counts forbidden
 * uses (among them any call but ncclCommGetAsyncError, ncclGetLastError
 * and ncclCommAbort on a nonblocking communicator still ncclInProgress),
 * fake_nccl_ops() collectives and transfers run, fake_nccl_waiting()
 * ranks' collectives running on their streams, waiting for the other
 * ranks' (a rank that arrives last does not wait, unless held),
 * fake_nccl_aborts() ncclCommAbort calls, fake_nccl_order(msg, len)
 * checks that every two devices ran the operations of the communicators
 * they share in the same order.  FAKE_NCCL_VERSION in the environment
 * sets the version reported (default 2.28.9).  ncclCommInitAll (blocking
 * communicators, settled from the start) is kept for perf/nccl_path.
 *
 * Across processes (hosts): with FAKE_NCCL_SPAN_DIR in the environment
 * of the process that calls ncclGetUniqueId, the id names a file there
 * (a world in shared memory: process-shared lock and condition, each
 * rank's input copied in), so ranks of one communicator may be in several
 * processes that map it: each rank computes its own output from every
 * rank's copied input, and a send is copied into its receiver's mailbox
 * (at most FAKE_NCCL_SPAN_CAP bytes an input, default 1 MiB; 16 ranks).
 * An abort there, or a rank's process that ended (looked for every 10 ms
 * while waiting), ends every process's waits, and their ranks then
 * report ncclRemoteError (what NCCL reports when a peer went).  Two ranks on one
 * device of one host (hostname) are "Duplicate GPU".  Holds and injected
 * failures leave such worlds alone (FAKE_NCCL_SPAN_STALL_AFTER: see
 * xcollective); fake_nccl_ops counts each rank's operations there.
 * FAKE_NCCL_SPAN_FAIL_INIT=k fails a process's k-th rank of such a world
 * (init_fails): it never joins, so the other ranks wait for it, as in
 * NCCL's bootstrap, until they abort.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>

#include <nccl.h>

#include "comm/reduce.h"

#define FS 16	      /* collectives in flight per communicator */
#define PQ 64	      /* sends in flight per (sender, receiver) */
#define MAXDEV 16
#define LOGN 65536    /* operations logged per device */

enum { K_ALLREDUCE = 1, K_ALLGATHER, K_REDUCESCATTER, K_REDUCE, K_BROADCAST,
       K_GATHER, K_SCATTER, K_ALLTOALL, K_SEND, K_RECV };

struct fop {
	int kind;
	const void *send;
	void *recv;
	size_t count;
	ncclDataType_t dt;
	ncclRedOp_t op;
	int root; /* the peer of a send or receive */
	uint64_t seq; /* collectives: #k of the rank */
	int dev, logi; /* where the order log holds it (-1: nowhere) */
};

struct world; /* the ranks of one communicator */

/* What one rank's stream runs for one group. */
struct fgroup {
	struct world *w;
	int rank;
	int n;
	/* Launched and not run yet (a failed runtime never runs it: the
	 * model keeps it, reachable, rather than leak it). */
	struct fgroup *next, *prev;
	struct fop ops[];
};

struct psend {
	const void *buf;
	size_t count;
	ncclDataType_t dt;
};

struct cslot {
	uint64_t seq; /* the collective it holds, while in use */
	int arrived, left;
	bool done;
	struct fop op[];
};

struct xworld;

struct world {
	uint64_t magic;
	struct xworld *x; /* across processes: the shared world, else NULL */
	int n, joined, id;
	int *dev;
	_Atomic int *inflight; /* per rank: groups launched, not run yet */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool dead; /* aborted, or failed asynchronously */
	_Atomic int err; /* fake_nccl_fail_inflight's: reported, no progress */
	struct cslot *cs[FS];
	/* per (sender, receiver): posted sends, tail posted, head taken */
	struct {
		struct psend q[PQ];
		uint64_t head, tail;
	} *pq;
	struct world *next;
};

struct ncclComm {
	struct world *w;
	int rank, dev;
	_Atomic int state;	/* ncclInProgress, ncclSuccess, or an error */
	int polls;		/* InProgress polls left (deferred launch) */
	struct fgroup **deferred;
	cudaStream_t *dstream;
	int ndeferred, capdeferred;
	uint64_t ncoll;		/* collectives issued */
	_Atomic int in_call;
	bool finalized;
	bool blocking; /* ncclCommInitAll's: settled from the start */
	bool outside;  /* its init failed: it never joined its world */
	char last[256];
};

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct world *worlds;
static int nworlds;
static _Atomic int fake_fail_err;
static _Atomic int fake_polls = 2;
static _Atomic int fake_init_polls = 2;
static _Atomic bool fake_hold;
static _Atomic long fake_inprogress_polls;
static _Atomic long misuse, nops, nwaiting, naborts;
static int dlog[MAXDEV][LOGN], ndlog[MAXDEV];
/* The calling thread's group; static TLS as in fake_cudart.c. */
static __thread struct {
	int depth;
	struct pend {
		struct ncclComm *comm;
		cudaStream_t s;
		struct fop op;
	} *p;
	int n, cap;
	bool init; /* an init was in the group */
} grp __attribute__((tls_model("initial-exec")));

void fake_nccl_fail(int err);
void fake_nccl_inprogress(int polls);
void fake_nccl_init_polls(int polls);
void fake_nccl_hold(int on);
int fake_nccl_fail_inflight(int err);
long fake_nccl_inprogress_polls(void);
/* ncclCommGetAsyncError calls that answered ncclInProgress. */
long fake_nccl_inprogress_polls(void)
{
	return atomic_load(&fake_inprogress_polls);
}

long fake_nccl_misuse(void);
long fake_nccl_ops(void);
long fake_nccl_waiting(void);
long fake_nccl_aborts(void);
int fake_nccl_order(char *msg, size_t len);

static void bad(const char *what)
{
	atomic_fetch_add(&misuse, 1);
	fprintf(stderr, "fake_nccl: misuse: %s\n", what);
}

void fake_nccl_fail(int err)
{
	atomic_store(&fake_fail_err, err);
	pthread_mutex_lock(&reg_mu);
	for (struct world *w = worlds; w != NULL; w = w->next) {
		pthread_mutex_lock(&w->mu);
		if (err != 0)
			w->dead = true;
		pthread_cond_broadcast(&w->cv);
		pthread_mutex_unlock(&w->mu);
	}
	pthread_mutex_unlock(&reg_mu);
}

void fake_nccl_inprogress(int polls)
{
	atomic_store(&fake_polls, polls);
}

void fake_nccl_init_polls(int polls)
{
	atomic_store(&fake_init_polls, polls);
}

/* Held collectives wait; released, their last waiter computes them. */
void fake_nccl_hold(int on)
{
	atomic_store(&fake_hold, on != 0);
	pthread_mutex_lock(&reg_mu);
	for (struct world *w = worlds; w != NULL; w = w->next) {
		pthread_mutex_lock(&w->mu);
		pthread_cond_broadcast(&w->cv);
		pthread_mutex_unlock(&w->mu);
	}
	pthread_mutex_unlock(&reg_mu);
}

/* The communicators with ranks inside a collective now fail with err
 * (reported by ncclCommGetAsyncError); their ranks keep waiting there
 * until an abort.  Returns how many failed. */
int fake_nccl_fail_inflight(int err)
{
	int n = 0;

	pthread_mutex_lock(&reg_mu);
	for (struct world *w = worlds; w != NULL; w = w->next) {
		bool inside = false;
		pthread_mutex_lock(&w->mu);
		for (int i = 0; i < FS; i++)
			inside |= w->cs[i]->arrived > w->cs[i]->left &&
				  !w->cs[i]->done;
		if (inside && !w->dead && atomic_load(&w->err) == 0) {
			atomic_store(&w->err, err);
			n++;
		}
		pthread_mutex_unlock(&w->mu);
	}
	pthread_mutex_unlock(&reg_mu);
	return n;
}

long fake_nccl_misuse(void)
{
	return atomic_load(&misuse);
}

long fake_nccl_ops(void)
{
	return atomic_load(&nops);
}

long fake_nccl_waiting(void)
{
	return atomic_load(&nwaiting);
}

long fake_nccl_aborts(void)
{
	return atomic_load(&naborts);
}

/* Two devices ran the operations of the communicators they share in the
 * same order. */
int fake_nccl_order(char *msg, size_t len)
{
	int ret = 0;

	pthread_mutex_lock(&reg_mu);
	for (int a = 0; a < MAXDEV && ret == 0; a++)
		for (int b = a + 1; b < MAXDEV && ret == 0; b++) {
			int i = 0, j = 0;
			/* Drop the ones the other device is not in. */
			for (;;) {
				while (i < ndlog[a] && dlog[a][i] < 0)
					i++;
				while (j < ndlog[b] && dlog[b][j] < 0)
					j++;
				bool in_b = false, in_a = false;
				for (struct world *w = worlds;
				     w != NULL && i < ndlog[a]; w = w->next)
					if (w->id == dlog[a][i])
						for (int r = 0; r < w->n; r++)
							in_b |= w->dev[r] == b;
				for (struct world *w = worlds;
				     w != NULL && j < ndlog[b]; w = w->next)
					if (w->id == dlog[b][j])
						for (int r = 0; r < w->n; r++)
							in_a |= w->dev[r] == a;
				if (i < ndlog[a] && !in_b) {
					i++;
					continue;
				}
				if (j < ndlog[b] && !in_a) {
					j++;
					continue;
				}
				if (i >= ndlog[a] || j >= ndlog[b])
					break;
				if (dlog[a][i] != dlog[b][j]) {
					snprintf(msg, len,
						 "devices %d and %d: op %d is "
						 "of communicator %d on one, %d "
						 "on the other",
						 a, b, i, dlog[a][i], dlog[b][j]);
					ret = -1;
					break;
				}
				i++, j++;
			}
		}
	pthread_mutex_unlock(&reg_mu);
	return ret;
}

/* Logs an operation of world issued on dev: its index, or -1. */
static int note(int dev, int world)
{
	int i = -1;

	pthread_mutex_lock(&reg_mu);
	if (dev >= 0 && dev < MAXDEV && ndlog[dev] < LOGN) {
		i = ndlog[dev]++;
		dlog[dev][i] = world;
	}
	pthread_mutex_unlock(&reg_mu);
	return i;
}

/* An operation its communicator's abort cancelled never ran: no order
 * constrains it. */
static void unnote(int dev, int i)
{
	pthread_mutex_lock(&reg_mu);
	if (i >= 0)
		dlog[dev][i] = -1;
	pthread_mutex_unlock(&reg_mu);
}

/* Entering a communicator's call: one thread at a time. */
static void enter(struct ncclComm *c)
{
	if (c != NULL && atomic_exchange(&c->in_call, 1))
		bad("two threads in one communicator at once");
}

static void leave(struct ncclComm *c)
{
	if (c != NULL)
		atomic_store(&c->in_call, 0);
}

static size_t tsize(ncclDataType_t t)
{
	switch (t) {
	case ncclInt8:
	case ncclUint8:
		return 1;
	case ncclFloat16:
	case ncclBfloat16:
		return 2;
	case ncclInt32:
	case ncclUint32:
	case ncclFloat32:
		return 4;
	default:
		return 8;
	}
}

static cgr_dtype cgr_type(ncclDataType_t t)
{
	static const cgr_dtype map[] = {
		[ncclInt8] = CGR_INT8,	     [ncclUint8] = CGR_UINT8,
		[ncclInt32] = CGR_INT32,     [ncclUint32] = CGR_UINT32,
		[ncclInt64] = CGR_INT64,     [ncclUint64] = CGR_UINT64,
		[ncclFloat16] = CGR_FLOAT16, [ncclFloat32] = CGR_FLOAT32,
		[ncclFloat64] = CGR_FLOAT64, [ncclBfloat16] = CGR_BFLOAT16,
	};
	return map[t];
}

static cgr_redop cgr_op(ncclRedOp_t op)
{
	static const cgr_redop map[] = {
		[ncclSum] = CGR_SUM, [ncclProd] = CGR_PROD, [ncclMax] = CGR_MAX,
		[ncclMin] = CGR_MIN, [ncclAvg] = CGR_AVG,
	};
	return map[op];
}


/* ---- worlds across processes (FAKE_NCCL_SPAN_DIR) -------------------- */

#define XMAXR 16 /* ranks */
#define XFS 4	 /* collectives in flight */
#define XPQ 4	 /* sends in flight per (sender, receiver) */

struct xop {
	int kind, dt, op, root;
	uint64_t count;
};

struct xslot {
	uint64_t seq;
	int arrived, left;
	struct xop op[XMAXR];
};

struct xq {
	uint64_t head, tail;
	uint64_t count[XPQ];
	int dt[XPQ];
};

/* The file's head; the data follows: each slot's inputs (XFS x XMAXR),
 * then each pair's mailbox (XMAXR x XMAXR x XPQ), cap bytes each. */
struct xworld {
	uint64_t magic;
	int n, joined, dead;
	uint64_t cap;
	int dev[XMAXR];
	char host[XMAXR][64];
	int pid[XMAXR]; /* each rank's process */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct xslot cs[XFS];
	struct xq pq[XMAXR * XMAXR];
};

#define XHEAD ((sizeof(struct xworld) + 4095) & ~(size_t)4095)

static size_t xsize(uint64_t cap)
{
	return XHEAD + (size_t)(XFS * XMAXR + XMAXR * XMAXR * XPQ) * cap;
}

static unsigned char *xin(struct xworld *x, int slot, int r)
{
	return (unsigned char *)x + XHEAD +
	       ((size_t)slot * XMAXR + (size_t)r) * x->cap;
}

static unsigned char *xbox(struct xworld *x, int from, int to, uint64_t i)
{
	return (unsigned char *)x + XHEAD +
	       ((size_t)XFS * XMAXR +
		(((size_t)from * XMAXR + (size_t)to) * XPQ + i % XPQ)) *
		       x->cap;
}

static void xpath(char *p, size_t len, const char *dir, uint64_t magic)
{
	snprintf(p, len, "%s/fake-nccl-%016llx", dir,
		 (unsigned long long)magic);
}

/* Whether a rank's process ended (a zombie too): NCCL sees its
 * connections close. */
static bool xgone(int pid)
{
	char path[64], st[256];
	const char *p;
	FILE *f;
	size_t n;

	if (pid <= 0 || pid == getpid())
		return false;
	if (kill(pid, 0) != 0 && errno == ESRCH)
		return true;
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	if ((f = fopen(path, "r")) == NULL)
		return true;
	n = fread(st, 1, sizeof(st) - 1, f);
	fclose(f);
	st[n] = 0;
	p = strrchr(st, ')');
	return p != NULL && p[1] == ' ' && p[2] == 'Z';
}

/* Locks x; one whose holder died (a killed process) is made consistent,
 * and the world is dead. */
static void xlock(struct xworld *x)
{
	if (pthread_mutex_lock(&x->mu) == EOWNERDEAD) {
		pthread_mutex_consistent(&x->mu);
		x->dead = 1;
		pthread_cond_broadcast(&x->cv);
	}
}

/* Waits on x (locked) for a while; a rank whose process ended kills the
 * world, as NCCL reports a peer gone (ncclRemoteError). */
static void xwait(struct xworld *x)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += 10000000;
	if (ts.tv_nsec >= 1000000000)
		ts.tv_sec++, ts.tv_nsec -= 1000000000;
	if (pthread_cond_timedwait(&x->cv, &x->mu, &ts) == EOWNERDEAD) {
		pthread_mutex_consistent(&x->mu);
		x->dead = 1;
	}
	for (int r = 0; !x->dead && r < x->n; r++)
		if (xgone(x->pid[r]))
			x->dead = 1;
	if (x->dead)
		pthread_cond_broadcast(&x->cv);
}

/* A new world's file (by the id's maker): 0, or -1. */
static int xcreate(const char *dir, uint64_t magic)
{
	const char *e = getenv("FAKE_NCCL_SPAN_CAP");
	uint64_t cap = e != NULL ? strtoull(e, NULL, 0) : (1u << 20);
	pthread_mutexattr_t ma;
	pthread_condattr_t ca;
	struct xworld *x;
	char path[512];
	int fd;

	cap = (cap + 63) & ~(uint64_t)63;
	xpath(path, sizeof(path), dir, magic);
	fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
	if (fd < 0)
		return -1;
	if (ftruncate(fd, (off_t)xsize(cap)) != 0) {
		close(fd);
		return -1;
	}
	x = mmap(NULL, XHEAD, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (x == MAP_FAILED)
		return -1;
	x->cap = cap;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
	pthread_mutex_init(&x->mu, &ma);
	pthread_condattr_init(&ca);
	pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
	pthread_cond_init(&x->cv, &ca);
	__atomic_store_n(&x->magic, magic, __ATOMIC_RELEASE);
	munmap(x, XHEAD);
	return 0;
}

/* The world of id magic made by another process (or this one). */
static struct xworld *xopen(const char *dir, uint64_t magic, int n)
{
	struct xworld *x;
	char path[512];
	uint64_t cap;
	int fd;

	xpath(path, sizeof(path), dir, magic);
	if ((fd = open(path, O_RDWR)) < 0)
		return NULL;
	x = mmap(NULL, XHEAD, PROT_READ, MAP_SHARED, fd, 0);
	if (x == MAP_FAILED ||
	    __atomic_load_n(&x->magic, __ATOMIC_ACQUIRE) != magic) {
		close(fd);
		return NULL;
	}
	cap = x->cap;
	munmap(x, XHEAD);
	x = mmap(NULL, xsize(cap), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (x == MAP_FAILED)
		return NULL;
	xlock(x);
	if (x->n == 0)
		x->n = n;
	else if (x->n != n)
		bad("ranks of one id disagree on the size");
	pthread_mutex_unlock(&x->mu);
	return x;
}

/* Bytes of rank r's input to op (n ranks). */
static size_t xinput(const struct fop *o, int r, int n)
{
	size_t b = o->count * tsize(o->dt);

	switch (o->kind) {
	case K_REDUCESCATTER:
	case K_ALLTOALL:
		return (size_t)n * b;
	case K_SCATTER:
		return r == o->root ? (size_t)n * b : 0;
	case K_BROADCAST:
		return r == o->root ? b : 0;
	default:
		return b;
	}
}

/* Rank r's output of slot i's collective, from every rank's input. */
static void xcompute(struct xworld *x, int i, int r, const struct fop *o)
{
	int n = x->n, root = o->root;
	size_t b = o->count * tsize(o->dt);
	const void *srcs[XMAXR];
	unsigned char *rb = o->recv;

	if (b == 0)
		return;
	switch (o->kind) {
	case K_ALLREDUCE:
	case K_REDUCE:
	case K_REDUCESCATTER:
		if (o->kind == K_REDUCE && r != root)
			break;
		for (int j = 0; j < n; j++)
			srcs[j] = xin(x, i, j) +
				  (o->kind == K_REDUCESCATTER ? (size_t)r * b : 0);
		if (o->count)
			cgr__reduce(rb, srcs, n, o->count, cgr_type(o->dt),
				    cgr_op(o->op), n);
		break;
	case K_ALLGATHER:
	case K_GATHER:
		for (int j = 0; j < n && (o->kind == K_ALLGATHER || r == root);
		     j++)
			memcpy(rb + (size_t)j * b, xin(x, i, j), b);
		break;
	case K_BROADCAST:
		if (r != root || o->recv != o->send) /* in place at the root */
			memcpy(rb, xin(x, i, root), b);
		break;
	case K_SCATTER:
		memcpy(rb, xin(x, i, root) + (size_t)r * b, b);
		break;
	case K_ALLTOALL:
		for (int j = 0; j < n; j++)
			memcpy(rb + (size_t)j * b, xin(x, i, j) + (size_t)r * b,
			       b);
		break;
	default:
		break;
	}
}

/* Rank r's part of collective op in a world across processes.  With
 * FAKE_NCCL_SPAN_STALL_AFTER=k in its environment, a process's ranks
 * never arrive at its collectives after the k-th (as on a hung GPU):
 * the others wait for them until an abort. */
static void xcollective(struct world *w, int r, const struct fop *op)
{
	static _Atomic long nx;
	const char *stall = getenv("FAKE_NCCL_SPAN_STALL_AFTER");
	struct xworld *x = w->x;
	int n = x->n, i = (int)(op->seq % XFS);
	struct xslot *cs = &x->cs[i];
	size_t in = xinput(op, r, n);
	bool ran = false;

	if (in > x->cap) {
		bad("an input larger than FAKE_NCCL_SPAN_CAP");
		return;
	}
	xlock(x);
	if (stall != NULL && atomic_fetch_add(&nx, 1) >= atol(stall)) {
		while (!x->dead)
			xwait(x);
		pthread_mutex_unlock(&x->mu);
		unnote(op->dev, op->logi);
		return;
	}
	while (!x->dead && cs->seq != op->seq && (cs->arrived || cs->left))
		xwait(x);
	if (!x->dead) {
		cs->seq = op->seq;
		if (in > 0)
			memcpy(xin(x, i, r), op->send, in);
		cs->op[r] = (struct xop){ op->kind, (int)op->dt, (int)op->op,
					  op->root, op->count };
		cs->arrived++;
		pthread_cond_broadcast(&x->cv);
		atomic_fetch_add(&nwaiting, 1);
		while (!x->dead && cs->arrived < n)
			xwait(x);
		atomic_fetch_sub(&nwaiting, 1);
	}
	if (!x->dead) {
		for (int j = 0; j < n; j++)
			if (memcmp(&cs->op[j], &cs->op[0], sizeof(cs->op[0])))
				bad("ranks disagree on a collective");
		xcompute(x, i, r, op);
		ran = true;
		if (++cs->left == n) {
			cs->arrived = cs->left = 0;
			pthread_cond_broadcast(&x->cv);
		}
	}
	pthread_mutex_unlock(&x->mu);
	if (ran)
		atomic_fetch_add(&nops, 1);
	else
		unnote(op->dev, op->logi);
}

/* The sends and receives of one group in a world across processes: every
 * send copied into its receiver's mailbox, then every receive taken. */
static void xtransfers(struct world *w, int r, const struct fgroup *g)
{
	struct xworld *x = w->x;

	xlock(x);
	for (int i = 0; i < g->n && !x->dead; i++) {
		const struct fop *o = &g->ops[i];
		struct xq *q = &x->pq[r * XMAXR + o->root];
		size_t b = o->count * tsize(o->dt);
		if (o->kind != K_SEND)
			continue;
		if (b > x->cap) {
			bad("a send larger than FAKE_NCCL_SPAN_CAP");
			continue;
		}
		while (!x->dead && q->tail - q->head >= XPQ)
			xwait(x);
		if (x->dead)
			break;
		if (b > 0)
			memcpy(xbox(x, r, o->root, q->tail), o->send, b);
		q->count[q->tail % XPQ] = o->count;
		q->dt[q->tail % XPQ] = (int)o->dt;
		q->tail++;
		atomic_fetch_add(&nops, 1);
		pthread_cond_broadcast(&x->cv);
	}
	for (int i = 0; i < g->n && !x->dead; i++) {
		const struct fop *o = &g->ops[i];
		struct xq *q = &x->pq[o->root * XMAXR + r];
		if (o->kind != K_RECV)
			continue;
		while (!x->dead && q->tail == q->head)
			xwait(x);
		if (x->dead)
			break;
		if (q->count[q->head % XPQ] != o->count ||
		    q->dt[q->head % XPQ] != (int)o->dt)
			bad("a send and its receive disagree");
		else if (o->count > 0)
			memcpy(o->recv, xbox(x, o->root, r, q->head),
			       o->count * tsize(o->dt));
		q->head++;
		atomic_fetch_add(&nops, 1);
		pthread_cond_broadcast(&x->cv);
	}
	pthread_mutex_unlock(&x->mu);
}

/* An abort anywhere ends every process's waits in x. */
static void xkill(struct xworld *x)
{
	xlock(x);
	x->dead = 1;
	pthread_cond_broadcast(&x->cv);
	pthread_mutex_unlock(&x->mu);
}

/* Whether every rank of x joined, and whether two share a device. */
static bool xjoined(struct xworld *x, bool *dup)
{
	bool all;

	xlock(x);
	all = x->joined == x->n;
	for (int i = 0; all && i < x->n; i++)
		for (int j = 0; j < i; j++)
			*dup |= x->dev[i] == x->dev[j] &&
				strcmp(x->host[i], x->host[j]) == 0;
	pthread_mutex_unlock(&x->mu);
	return all;
}

/* ---- the versions, ids, communicators -------------------------------- */

ncclResult_t ncclGetVersion(int *v)
{
	const char *e = getenv("FAKE_NCCL_VERSION");
	*v = e != NULL ? atoi(e) : 22809;
	return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r)
{
	switch ((int)r) {
	case ncclSuccess:
		return "no error";
	case ncclInProgress:
		return "operation in progress";
	case ncclSystemError:
		return "unhandled system error (fake)";
	case ncclRemoteError:
		return "remote process exited or there was a network error "
		       "(fake)";
	case ncclInvalidUsage:
		return "invalid usage (fake)";
	case ncclInvalidArgument:
		return "invalid argument (fake)";
	case 8: /* a code of newer NCCL releases, not in 2.28's nccl.h */
		return "operation timed out (fake)";
	default:
		return "fake NCCL error";
	}
}

const char *ncclGetLastError(ncclComm_t c)
{
	return c != NULL ? c->last : "";
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
	static _Atomic uint64_t next = 1;
	uint64_t m = atomic_fetch_add(&next, 1) * 0x9E3779B97F4A7C15ull;

	const char *dir = getenv("FAKE_NCCL_SPAN_DIR");

	memset(id, 0, sizeof(*id));
	if (dir != NULL) {
		/* Unique among the processes that share the directory. */
		m = ((uint64_t)getpid() << 24) ^ (m >> 40);
		if (xcreate(dir, m) != 0)
			return ncclSystemError;
		id->internal[8] = 'X';
		snprintf(id->internal + 16, sizeof(id->internal) - 16, "%s",
			 dir);
	}
	memcpy(id->internal, &m, sizeof(m));
	return ncclSuccess;
}

static struct world *world_of(uint64_t magic, int n, const char *span)
{
	struct world *w;

	pthread_mutex_lock(&reg_mu);
	for (w = worlds; w != NULL; w = w->next)
		if (w->magic == magic)
			break;
	if (w == NULL && (w = calloc(1, sizeof(*w))) != NULL) {
		w->magic = magic;
		if (span != NULL && (n > XMAXR ||
				     (w->x = xopen(span, magic, n)) == NULL)) {
			free(w);
			pthread_mutex_unlock(&reg_mu);
			return NULL;
		}
		w->n = n;
		w->id = nworlds++;
		w->dev = calloc((size_t)n, sizeof(int));
		/* Across processes: other processes' ranks on no device
		 * here (the order check is among this process's). */
		for (int r = 0; span != NULL && r < n; r++)
			w->dev[r] = -1;
		w->inflight = calloc((size_t)n, sizeof(*w->inflight));
		w->pq = calloc((size_t)n * (size_t)n, sizeof(*w->pq));
		for (int i = 0; i < FS; i++)
			w->cs[i] = calloc(1, sizeof(struct cslot) +
						     (size_t)n * sizeof(struct fop));
		pthread_mutex_init(&w->mu, NULL);
		pthread_cond_init(&w->cv, NULL);
		w->next = worlds;
		worlds = w;
	}
	pthread_mutex_unlock(&reg_mu);
	return w;
}

/* With FAKE_NCCL_SPAN_FAIL_INIT=k in the environment, the k-th rank this
 * process initialises in a world across processes (from 1) fails: it
 * reports ncclSystemError and never joins. */
static bool init_fails(void)
{
	static _Atomic long ninit;
	const char *e = getenv("FAKE_NCCL_SPAN_FAIL_INIT");

	return e != NULL && atomic_fetch_add(&ninit, 1) + 1 == atol(e);
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *out, int n, ncclUniqueId id,
				    int rank, ncclConfig_t *cfg)
{
	struct ncclComm *c;
	uint64_t magic;
	int dev = 0;

	if (cfg == NULL || cfg->blocking != 0)
		bad("init without a nonblocking config");
	if (rank < 0 || rank >= n)
		return ncclInvalidArgument;
	memcpy(&magic, id.internal, sizeof(magic));
	cudaGetDevice(&dev);
	c = calloc(1, sizeof(*c));
	c->w = world_of(magic, n, id.internal[8] == 'X' ? id.internal + 16 :
							     NULL);
	if (c->w == NULL) {
		free(c);
		return ncclSystemError;
	}
	if (c->w->x != NULL && init_fails()) {
		/* It never joins: the others wait for it (as NCCL's
		 * bootstrap does), and its abort leaves them be. */
		c->rank = rank;
		c->dev = dev;
		c->outside = true;
		snprintf(c->last, sizeof(c->last), "initialisation failed "
			 "(fake: FAKE_NCCL_SPAN_FAIL_INIT)");
		atomic_init(&c->state, ncclSystemError);
		*out = c;
		if (grp.depth > 0) {
			grp.init = true;
			return ncclSuccess;
		}
		return ncclInProgress;
	}
	if (c->w->x != NULL) {
		struct xworld *x = c->w->x;
		xlock(x);
		x->dev[rank] = dev;
		x->pid[rank] = getpid();
		gethostname(x->host[rank], sizeof(x->host[rank]) - 1);
		x->joined++;
		pthread_mutex_unlock(&x->mu);
	}
	c->rank = rank;
	c->dev = dev;
	atomic_init(&c->state, ncclInProgress);
	c->polls = atomic_load(&fake_init_polls);
	pthread_mutex_lock(&c->w->mu);
	c->w->dev[rank] = dev;
	c->w->joined++;
	pthread_mutex_unlock(&c->w->mu);
	*out = c;
	if (grp.depth > 0) {
		grp.init = true;
		return ncclSuccess;
	}
	return ncclInProgress;
}

/* Blocking communicators of ranks on devs[0..n) (0..n-1 if NULL), as
 * the baselines of tests/gpu-nccl use. */
ncclResult_t ncclCommInitAll(ncclComm_t *comms, int n, const int *devs)
{
	ncclUniqueId id;
	uint64_t magic;
	struct world *w;

	ncclGetUniqueId(&id);
	memcpy(&magic, id.internal, sizeof(magic));
	if ((w = world_of(magic, n, NULL)) == NULL)
		return ncclSystemError;
	for (int r = 0; r < n; r++) {
		struct ncclComm *c = calloc(1, sizeof(*c));
		c->w = w;
		c->rank = r;
		c->dev = devs != NULL ? devs[r] : r;
		c->blocking = true;
		atomic_init(&c->state, ncclSuccess);
		pthread_mutex_lock(&w->mu);
		w->dev[r] = c->dev;
		w->joined++;
		pthread_mutex_unlock(&w->mu);
		comms[r] = c;
	}
	return ncclSuccess;
}

/* Launches group g on stream s: a host function of the fake runtime. */
static void run_group(void *arg);

static struct fgroup launched = { .next = &launched, .prev = &launched };

static void launch(struct ncclComm *c, cudaStream_t s, struct fgroup *g)
{
	pthread_mutex_lock(&reg_mu);
	g->next = launched.next;
	g->prev = &launched;
	launched.next->prev = g;
	launched.next = g;
	pthread_mutex_unlock(&reg_mu);
	atomic_fetch_add(&c->w->inflight[c->rank], 1);
	for (int i = 0; i < g->n; i++) {
		g->ops[i].dev = c->dev;
		g->ops[i].logi = note(c->dev, c->w->id);
	}
	cudaLaunchHostFunc(s, run_group, g);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *err)
{
	struct world *w = c->w;
	int st;

	enter(c);
	if (atomic_load(&fake_fail_err) != 0) {
		*err = (ncclResult_t)atomic_load(&fake_fail_err);
		snprintf(c->last, sizeof(c->last),
			 "fake network failure injected");
		leave(c);
		return ncclSuccess;
	}
	if (w->x != NULL && __atomic_load_n(&w->x->dead, __ATOMIC_ACQUIRE)) {
		*err = ncclRemoteError;
		snprintf(c->last, sizeof(c->last),
			 "a rank of the communicator aborted (fake)");
		leave(c);
		return ncclSuccess;
	}
	if (atomic_load(&w->err) != 0) {
		*err = (ncclResult_t)atomic_load(&w->err);
		snprintf(c->last, sizeof(c->last),
			 "fake failure injected mid-collective");
		leave(c);
		return ncclSuccess;
	}
	st = atomic_load(&c->state);
	if (st == ncclInProgress && c->polls > 0) {
		c->polls--;
	} else if (st == ncclInProgress && c->finalized) {
		if (atomic_load(&w->inflight[c->rank]) == 0)
			atomic_store(&c->state, ncclSuccess);
	} else if (st == ncclInProgress) {
		bool all, dup = false;
		pthread_mutex_lock(&w->mu);
		all = w->joined == w->n;
		for (int i = 0; all && w->x == NULL && i < w->n; i++)
			for (int j = 0; j < i; j++)
				dup |= w->dev[i] == w->dev[j];
		pthread_mutex_unlock(&w->mu);
		if (w->x != NULL)
			all = xjoined(w->x, &dup);
		if (all && dup) {
			snprintf(c->last, sizeof(c->last),
				 "Duplicate GPU detected (fake)");
			atomic_store(&c->state, ncclInvalidUsage);
		} else if (all) {
			/* Settled: what group end deferred is enqueued now. */
			for (int i = 0; i < c->ndeferred; i++)
				launch(c, c->dstream[i], c->deferred[i]);
			c->ndeferred = 0;
			atomic_store(&c->state, ncclSuccess);
		}
	}
	*err = (ncclResult_t)atomic_load(&c->state);
	if (*err == ncclInProgress)
		atomic_fetch_add(&fake_inprogress_polls, 1);
	leave(c);
	return ncclSuccess;
}

/* A call NCCL forbids on a nonblocking communicator still in progress. */
static void settled(struct ncclComm *c, const char *what)
{
	if (!c->blocking && atomic_load(&c->state) == ncclInProgress)
		bad(what);
}

ncclResult_t ncclCommFinalize(ncclComm_t c)
{
	enter(c);
	settled(c, "finalize on a communicator still in progress");
	c->finalized = true;
	if (c->ndeferred != 0)
		bad("finalize with a group not yet enqueued");
	atomic_store(&c->state, ncclInProgress);
	leave(c);
	return ncclInProgress;
}

ncclResult_t ncclCommDestroy(ncclComm_t c)
{
	enter(c);
	if (!c->blocking &&
	    (!c->finalized || atomic_load(&c->state) != ncclSuccess))
		bad("destroy without a finished finalize");
	if (atomic_load(&c->w->inflight[c->rank]) != 0)
		bad("destroy with work in flight");
	free(c->deferred);
	free(c->dstream);
	free(c);
	return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t c)
{
	struct world *w = c->w;

	enter(c);
	atomic_fetch_add(&naborts, 1);
	if (w->x != NULL && !c->outside)
		xkill(w->x);
	pthread_mutex_lock(&w->mu);
	w->dead = true;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
	/* Host functions launched on its streams no longer touch it. */
	for (int i = 0; i < c->ndeferred; i++)
		free(c->deferred[i]);
	free(c->deferred);
	free(c->dstream);
	free(c);
	return ncclSuccess;
}

/* ---- running: what a rank's stream does ------------------------------ */

/* The slot of collective #k, once it is free for it (false: dead). */
static struct cslot *slot_wait(struct world *w, uint64_t k)
{
	struct cslot *cs = w->cs[k % FS];

	while (!w->dead && cs->seq != k && (cs->arrived || cs->left))
		pthread_cond_wait(&w->cv, &w->mu);
	if (w->dead)
		return NULL;
	if (cs->seq != k) {
		cs->seq = k;
		cs->done = false;
	}
	return cs;
}

/* Every rank's part of collective slot cs, computed apart first (in place
 * is then safe), then written. */
static void compute(struct world *w, struct cslot *cs)
{
	const struct fop *o = cs->op;
	int n = w->n, kind = o[0].kind, root = o[0].root;
	size_t es = tsize(o[0].dt), cnt = o[0].count, b = cnt * es;
	unsigned char *tmp = malloc((size_t)n * (size_t)n * b + 1);
	const void *srcs[64];

	for (int j = 1; j < n; j++)
		if (o[j].kind != kind || o[j].count != cnt || o[j].dt != o[0].dt ||
		    o[j].root != root || o[j].op != o[0].op)
			bad("ranks disagree on a collective");
	switch (kind) {
	case K_ALLREDUCE:
	case K_REDUCE:
		for (int j = 0; j < n; j++)
			srcs[j] = o[j].send;
		if (cnt)
			cgr__reduce(tmp, srcs, n, cnt, cgr_type(o[0].dt),
				    cgr_op(o[0].op), n);
		for (int j = 0; j < n; j++)
			if (kind == K_ALLREDUCE || j == root)
				memcpy(o[j].recv, tmp, b);
		break;
	case K_REDUCESCATTER:
		for (int r = 0; r < n; r++) {
			for (int j = 0; j < n; j++)
				srcs[j] = (const char *)o[j].send + (size_t)r * b;
			if (cnt)
				cgr__reduce(tmp + (size_t)r * b, srcs, n, cnt,
					    cgr_type(o[0].dt), cgr_op(o[0].op),
					    n);
		}
		for (int r = 0; r < n; r++)
			memcpy(o[r].recv, tmp + (size_t)r * b, b);
		break;
	case K_ALLGATHER:
	case K_GATHER:
		for (int j = 0; j < n; j++)
			memcpy(tmp + (size_t)j * b, o[j].send, b);
		for (int r = 0; r < n; r++)
			if (kind == K_ALLGATHER || r == root)
				memcpy(o[r].recv, tmp, (size_t)n * b);
		break;
	case K_BROADCAST:
		memcpy(tmp, o[root].send, b);
		for (int r = 0; r < n; r++)
			if (r != root || o[r].recv != o[r].send)
				memcpy(o[r].recv, tmp, b); /* (root in place) */
		break;
	case K_SCATTER:
		memcpy(tmp, o[root].send, (size_t)n * b);
		for (int r = 0; r < n; r++)
			memcpy(o[r].recv, tmp + (size_t)r * b, b);
		break;
	case K_ALLTOALL:
		for (int r = 0; r < n; r++)
			for (int j = 0; j < n; j++)
				memcpy(tmp + ((size_t)r * n + j) * b,
				       (const char *)o[j].send + (size_t)r * b, b);
		for (int r = 0; r < n; r++)
			memcpy(o[r].recv, tmp + (size_t)r * n * b,
			       (size_t)n * b);
		break;
	default:
		break;
	}
	free(tmp);
	atomic_fetch_add(&nops, 1);
}

/* Rank r's part of collective op: meets the other ranks'. */
static void collective(struct world *w, int r, const struct fop *op)
{
	struct cslot *cs;
	bool cancelled;

	pthread_mutex_lock(&w->mu);
	if ((cs = slot_wait(w, op->seq)) == NULL) {
		pthread_mutex_unlock(&w->mu);
		return;
	}
	cs->op[r] = *op;
	cs->arrived++;
	atomic_fetch_add(&nwaiting, 1);
	/* A failed world (err) never progresses: only an abort ends it. */
	while (!cs->done && !w->dead) {
		if (cs->arrived == w->n && !atomic_load(&fake_hold) &&
		    atomic_load(&w->err) == 0) {
			compute(w, cs);
			cs->done = true;
			pthread_cond_broadcast(&w->cv);
			break;
		}
		pthread_cond_wait(&w->cv, &w->mu);
	}
	atomic_fetch_sub(&nwaiting, 1);
	cancelled = !cs->done;
	if (++cs->left == w->n) {
		cs->arrived = cs->left = 0;
		pthread_cond_broadcast(&w->cv);
	}
	pthread_mutex_unlock(&w->mu);
	if (cancelled) /* reg_mu after w->mu, never inside it */
		unnote(op->dev, op->logi);
}

/* The sends and receives of one group: every send posted, every receive
 * taken, then every send waited for. */
static void transfers(struct world *w, int r, const struct fgroup *g)
{
	uint64_t mine[64];
	int nm = 0, n = w->n;

	pthread_mutex_lock(&w->mu);
	for (int i = 0; i < g->n; i++) {
		const struct fop *o = &g->ops[i];
		if (o->kind != K_SEND)
			continue;
		__typeof__(w->pq[0]) *q = &w->pq[(size_t)r * n + o->root];
		while (!w->dead && q->tail - q->head >= PQ)
			pthread_cond_wait(&w->cv, &w->mu);
		q->q[q->tail % PQ] = (struct psend){ o->send, o->count, o->dt };
		if (nm < 64)
			mine[nm++] = ((uint64_t)o->root << 32) | (q->tail & 0xffffffffu);
		q->tail++;
		pthread_cond_broadcast(&w->cv);
	}
	for (int i = 0; i < g->n && !w->dead; i++) {
		const struct fop *o = &g->ops[i];
		if (o->kind != K_RECV)
			continue;
		__typeof__(w->pq[0]) *q = &w->pq[(size_t)o->root * n + r];
		while (!w->dead && q->tail == q->head)
			pthread_cond_wait(&w->cv, &w->mu);
		if (w->dead)
			break;
		struct psend *ps = &q->q[q->head % PQ];
		if (ps->count != o->count || ps->dt != o->dt)
			bad("a send and its receive disagree");
		else
			memcpy(o->recv, ps->buf, o->count * tsize(o->dt));
		q->head++;
		atomic_fetch_add(&nops, 1);
		pthread_cond_broadcast(&w->cv);
	}
	for (int i = 0; i < nm && !w->dead; i++) {
		int peer = (int)(mine[i] >> 32);
		__typeof__(w->pq[0]) *q = &w->pq[(size_t)r * n + peer];
		while (!w->dead && (q->head & 0xffffffffu) <= (mine[i] & 0xffffffffu))
			pthread_cond_wait(&w->cv, &w->mu);
	}
	pthread_mutex_unlock(&w->mu);
}

static void run_group(void *arg)
{
	struct fgroup *g = arg;
	bool p2p = false;

	pthread_mutex_lock(&reg_mu);
	g->prev->next = g->next;
	g->next->prev = g->prev;
	pthread_mutex_unlock(&reg_mu);
	for (int i = 0; i < g->n; i++) {
		if (g->ops[i].kind == K_SEND || g->ops[i].kind == K_RECV)
			p2p = true;
		else if (g->w->x != NULL)
			xcollective(g->w, g->rank, &g->ops[i]);
		else
			collective(g->w, g->rank, &g->ops[i]);
	}
	if (p2p && g->w->x != NULL)
		xtransfers(g->w, g->rank, g);
	else if (p2p)
		transfers(g->w, g->rank, g);
	atomic_fetch_sub(&g->w->inflight[g->rank], 1);
	free(g);
}

/* ---- groups and operations ----------------------------------------- */

ncclResult_t ncclGroupStart(void)
{
	grp.depth++;
	return ncclSuccess;
}

/* The group's operations of communicator c on stream s, in order. */
static struct fgroup *take(struct ncclComm *c, cudaStream_t s)
{
	int n = 0, k = 0;
	struct fgroup *g;

	for (int i = 0; i < grp.n; i++)
		n += grp.p[i].comm == c && grp.p[i].s == s;
	g = malloc(sizeof(*g) + (size_t)n * sizeof(struct fop));
	g->w = c->w;
	g->rank = c->rank;
	g->n = n;
	for (int i = 0; i < grp.n; i++)
		if (grp.p[i].comm == c && grp.p[i].s == s) {
			g->ops[k++] = grp.p[i].op;
			grp.p[i].comm = NULL; /* taken */
		}
	return g;
}

static void defer(struct ncclComm *c, cudaStream_t s, struct fgroup *g)
{
	if (c->ndeferred == c->capdeferred) {
		c->capdeferred = c->capdeferred ? 2 * c->capdeferred : 8;
		c->deferred = realloc(c->deferred, (size_t)c->capdeferred *
							   sizeof(*c->deferred));
		c->dstream = realloc(c->dstream, (size_t)c->capdeferred *
							 sizeof(*c->dstream));
	}
	c->deferred[c->ndeferred] = g;
	c->dstream[c->ndeferred++] = s;
}

ncclResult_t ncclGroupEnd(void)
{
	int polls = atomic_load(&fake_polls);
	bool init = grp.init, nonblocking = false;

	if (grp.depth <= 0)
		return ncclInvalidUsage;
	if (--grp.depth > 0)
		return ncclSuccess;
	grp.init = false;
	for (int i = 0; i < grp.n; i++) {
		struct ncclComm *c = grp.p[i].comm;
		struct fgroup *g;
		if (c == NULL)
			continue;
		enter(c);
		g = take(c, grp.p[i].s);
		nonblocking |= !c->blocking;
		if (!c->blocking &&
		    (polls > 0 || atomic_load(&c->state) != ncclSuccess)) {
			/* Enqueued "in the background": once settled. */
			defer(c, grp.p[i].s, g);
			c->polls = polls;
			atomic_store(&c->state, ncclInProgress);
		} else {
			launch(c, grp.p[i].s, g);
		}
		leave(c);
	}
	/* Freed per group: a thread-local array would outlive its thread. */
	free(grp.p);
	grp.p = NULL;
	grp.n = grp.cap = 0;
	return init || (polls > 0 && nonblocking) ? ncclInProgress :
						      ncclSuccess;
}

static ncclResult_t add(struct ncclComm *c, cudaStream_t s, struct fop op)
{
	bool alone = grp.depth == 0;

	if (c == NULL)
		return ncclInvalidArgument;
	settled(c, "an operation on a communicator still in progress");
	if (atomic_load(&fake_fail_err) != 0)
		return ncclSuccess; /* it will never run */
	if (op.kind != K_SEND && op.kind != K_RECV)
		op.seq = ++c->ncoll;
	if (alone)
		ncclGroupStart();
	if (grp.n == grp.cap) {
		grp.cap = grp.cap ? 2 * grp.cap : 16;
		grp.p = realloc(grp.p, (size_t)grp.cap * sizeof(*grp.p));
	}
	grp.p[grp.n++] = (struct pend){ c, s, op };
	return alone ? ncclGroupEnd() : ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *sb, void *rb, size_t n,
			   ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
			   cudaStream_t s)
{
	return add(c, s, (struct fop){ K_ALLREDUCE, sb, rb, n, t, op, 0, 0, -1, -1 });
}

ncclResult_t ncclAllGather(const void *sb, void *rb, size_t n,
			   ncclDataType_t t, ncclComm_t c, cudaStream_t s)
{
	return add(c, s, (struct fop){ K_ALLGATHER, sb, rb, n, t, 0, 0, 0, -1, -1 });
}

ncclResult_t ncclReduceScatter(const void *sb, void *rb, size_t n,
			       ncclDataType_t t, ncclRedOp_t op,
			       ncclComm_t c, cudaStream_t s)
{
	return add(c, s,
		   (struct fop){ K_REDUCESCATTER, sb, rb, n, t, op, 0, 0, -1, -1 });
}

ncclResult_t ncclReduce(const void *sb, void *rb, size_t n, ncclDataType_t t,
			ncclRedOp_t op, int root, ncclComm_t c, cudaStream_t s)
{
	return add(c, s, (struct fop){ K_REDUCE, sb, rb, n, t, op, root, 0, -1, -1 });
}

ncclResult_t ncclBroadcast(const void *sb, void *rb, size_t n,
			   ncclDataType_t t, int root, ncclComm_t c,
			   cudaStream_t s)
{
	return add(c, s,
		   (struct fop){ K_BROADCAST, sb, rb, n, t, 0, root, 0, -1, -1 });
}

ncclResult_t ncclGather(const void *sb, void *rb, size_t n, ncclDataType_t t,
			int root, ncclComm_t c, cudaStream_t s)
{
	return add(c, s, (struct fop){ K_GATHER, sb, rb, n, t, 0, root, 0, -1, -1 });
}

ncclResult_t ncclScatter(const void *sb, void *rb, size_t n,
			 ncclDataType_t t, int root, ncclComm_t c,
			 cudaStream_t s)
{
	return add(c, s, (struct fop){ K_SCATTER, sb, rb, n, t, 0, root, 0, -1, -1 });
}

ncclResult_t ncclAlltoAll(const void *sb, void *rb, size_t n,
			  ncclDataType_t t, ncclComm_t c, cudaStream_t s)
{
	return add(c, s, (struct fop){ K_ALLTOALL, sb, rb, n, t, 0, 0, 0, -1, -1 });
}

ncclResult_t ncclSend(const void *sb, size_t n, ncclDataType_t t, int peer,
		      ncclComm_t c, cudaStream_t s)
{
	return add(c, s, (struct fop){ K_SEND, sb, NULL, n, t, 0, peer, 0, -1, -1 });
}

ncclResult_t ncclRecv(void *rb, size_t n, ncclDataType_t t, int peer,
		      ncclComm_t c, cudaStream_t s)
{
	return add(c, s, (struct fop){ K_RECV, NULL, rb, n, t, 0, peer, 0, -1, -1 });
}
