/*
 * cgr.h: the public interface of cgr, a compiled-graph runtime.
 *
 * A static graph of tasks bound to long-lived workers is compiled once into
 * one fixed program per worker, then executed again and again.  Control
 * messages move over lock-free SPSC rings; each worker runs one reactor
 * thread that executes its program and parks when idle.
 *
 * Conventions:
 *  - Every fallible call returns int: 0, a negative errno, or a CGR_E* code
 *    (all negative).  cgr_strerror() names any of them.  Results come back
 *    through the last pointer argument, which is untouched on failure.
 *  - Parameter structs start with `size_t size`; initialise them with the
 *    matching _INIT macro so that later versions can grow them.  A struct
 *    of an older, smaller size is read as far as it goes (the rest
 *    defaults), a newer, larger one's tail is ignored, and a size below
 *    sizeof(size_t) is -EINVAL.
 *  - Timeouts are in nanoseconds: a negative timeout means "the default"
 *    (from the compile parameters), 0 means "do not wait", CGR_FOREVER
 *    waits without a deadline.
 *  - Threads: unless a prototype says otherwise, a context and everything
 *    built from it may be used by one driver thread at a time, and by
 *    tasks driving other graphs (see "What a task may call").  Task
 *    functions and worker init/fini callbacks run on the worker's thread.
 */
#ifndef CGR_H
#define CGR_H

#include <stddef.h>
#include <stdint.h>
#include <dlpack/dlpack.h>
#include <cgr/version.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ */
/* Errors                                                             */
/* ------------------------------------------------------------------ */

/*
 * cgr's own codes live in a reserved negative range below any errno.
 * X(name, value, message).
 */
#define CGR_ERRNO_BASE (-10000)
#define CGR_ERROR_MAP(X)                                                     \
	X(CGR_ECORRUPT, -10001, "shared structure is corrupt or of another version") \
	X(CGR_ECYCLE, -10002, "graph has a cycle")                           \
	X(CGR_EUNREACHABLE, -10003, "node has no path to a graph output")    \
	X(CGR_EUNUSEDARG, -10004, "input argument is not used by any node")  \
	X(CGR_EWORKERGONE, -10005, "task is bound to a destroyed worker")    \
	X(CGR_ECOMPILED, -10006, "graph was already compiled")               \
	X(CGR_ECAPACITY, -10007, "too many executions in flight")            \
	X(CGR_ENARGS, -10008, "wrong number of arguments")                   \
	X(CGR_ETASK, -10009, "task failed")                                  \
	X(CGR_ETOOBIG, -10010, "value larger than its channel buffer")       \
	X(CGR_ESTUCK, -10011, "worker did not stop before the deadline and was abandoned") \
	X(CGR_ECLOSED, -10012, "compiled graph was torn down")               \
	X(CGR_ENOOUTPUT, -10013, "graph has no outputs")                     \
	X(CGR_EUNKNOWNREF, -10014, "reference is unknown, released or not yet returned") \
	X(CGR_EBADVALUE, -10015, "value is malformed or of an unsupported kind") \
	X(CGR_EMISMATCH, -10016, "collective members disagree (count, dtype, op, root or shape)") \
	X(CGR_EDEADLOCK, -10017, "graph schedule would deadlock") \
	X(CGR_EDEVICE, -10018, "device error (sticky)") \
	X(CGR_EPEERDEAD, -10019, "a worker died (its process ended, or its thread exited)") \
	X(CGR_EHOSTLOST, -10020, "a host of the job was lost (its process ended, or it was not heard from within the deadline)")

enum cgr_error {
#define CGR__ERR_ENUM(name, value, msg) name = value,
	CGR_ERROR_MAP(CGR__ERR_ENUM)
#undef CGR__ERR_ENUM
};

/* A static string describing err (0, negative errno or CGR_E*). Any thread. */
const char *cgr_strerror(int err);
/* The symbolic name ("CGR_ECYCLE", "ETIMEDOUT", ...). Any thread. */
const char *cgr_err_name(int err);

#define CGR_FOREVER INT64_MAX

/* ------------------------------------------------------------------ */
/* Context                                                            */
/* ------------------------------------------------------------------ */

typedef struct cgr_ctx cgr_ctx;
typedef struct cgr_worker cgr_worker;
typedef struct cgr_job cgr_job;

enum cgr_log_level {
	CGR_LOG_ERROR = 0,
	CGR_LOG_WARN = 1,
	CGR_LOG_INFO = 2,
	CGR_LOG_DEBUG = 3,
};

/*
 * Log hook: called from any cgr thread (driver or worker), possibly
 * concurrently; msg is one line without a newline, valid during the call.
 */
typedef void (*cgr_log_fn)(void *arg, int level, const char *msg);

/* A ready-made hook that writes "cgr: <level>: <msg>\n" to stderr. */
void cgr_log_stderr(void *arg, int level, const char *msg);

enum cgr_ctx_flags {
	/* Never use io_uring: park reactors with futex system calls.  Without
	 * it a reactor uses io_uring until any step of it fails (setup,
	 * register, enter, a request the kernel refuses: seccomp profiles
	 * refuse some of them), then parks with futex system calls; the
	 * context logs that once (CGR_LOG_WARN, naming the step; with this
	 * flag, CGR_LOG_INFO). */
	CGR_CTX_NO_IO_URING = 1u << 0,
};

typedef struct cgr_ctx_params {
	size_t size;
	/* NULL: diagnostics are dropped.  A worker process's own (its
	 * reactor, its side of a teardown) go to its stderr, as "cgr worker
	 * NAME (pid P): message", at log_level; none when log_fn is NULL. */
	cgr_log_fn log_fn;
	void *log_arg;
	int log_level;	   /* messages above this level are dropped */
	unsigned flags;	   /* CGR_CTX_* */
	/* The CUDA runtime library to load when this context first uses a
	 * CUDA device (a path for dlopen, copied); NULL: by soname, newest
	 * first (libcudart.so.13, then libcudart.so.12) from the loader's
	 * search path, then from the toolkit's lib64 found at build time.
	 * The runtime must report a 12.x or 13.x version.  A library that
	 * does not load, or reports another version or no device, means no
	 * CUDA device (-ENODEV; the log names the library, its version and
	 * the runtime's message). */
	const char *cudart_path;
	/* The NCCL library to load when this context first makes an NCCL
	 * communicator (a path, copied); NULL: libnccl.so.2 from the
	 * loader's search path, then the one found at build time. */
	const char *nccl_path;
	/* What process workers find by name (cgr_export; the table ends
	 * with an entry whose name is NULL; NULL: none): every task function
	 * and worker init and fini a process worker runs must be in it, the
	 * same table the program hands cgr_worker_main.  Not copied: it
	 * must outlive the context (a static table). */
	const struct cgr_export *exports;
	/* The job this process drives (cgr_job_join; NULL: none): workers
	 * of the context may then live on its other ranks
	 * (cgr_worker_params.rank).  The job must outlive the context. */
	cgr_job *job;
} cgr_ctx_params;
#define CGR_CTX_PARAMS_INIT                                              \
	{ sizeof(cgr_ctx_params), NULL, NULL, CGR_LOG_WARN, 0, NULL, NULL, \
	  NULL, NULL }

/*
 * Creates a context: the owner of workers, graphs and cgr's jemalloc arena.
 * p may be NULL for defaults.  Returns 0, -EINVAL (bad params), -ENOMEM.
 */
int cgr_ctx_create(const cgr_ctx_params *p, cgr_ctx **out);

/*
 * Destroys the context, its remaining graphs, compiled graphs (teardown
 * with a 1 s deadline each) and workers.  NULL is a no-op.  Blocks until done.  From
 * a task of one of its graphs it is refused (logged, nothing freed).
 */
void cgr_ctx_destroy(cgr_ctx *ctx);

/*
 * Bytes and blocks cgr holds in this context's arena right now (for leak
 * checks and capacity planning).  Any thread.
 */
int cgr_ctx_memory(const cgr_ctx *ctx, size_t *live_bytes,
		   size_t *live_blocks);

/* ------------------------------------------------------------------ */
/* Workers                                                            */
/* ------------------------------------------------------------------ */

/*
 * Worker state callbacks, run on the worker's own thread.  init builds the
 * user state (*state), fini frees it.  A non-zero return from init fails
 * cgr_worker_create with that code.
 */
typedef int (*cgr_worker_init_fn)(void *arg, void **state);
typedef void (*cgr_worker_fini_fn)(void *arg, void *state);

enum cgr_worker_kind {
	CGR_WORKER_THREAD = 0,	/* a thread of this process */
	CGR_WORKER_PROCESS = 1, /* a process of its own (see below) */
};

/*
 * Process workers.  A process worker is this program run again (the
 * executable of /proc/self/exe, with the same arguments) as a worker: it
 * must call cgr_worker_main() early in main, before anything that must
 * not run twice.  Since code is at other addresses in another process,
 * the task functions and worker init and fini it runs are found by name
 * in a table of exports, the same one in both: cgr_ctx_params.exports of
 * the context that starts it, and cgr_worker_main's argument.
 *
 * What crosses: a worker's init and fini get a copy of
 * cgr_worker_params.arg_data (arg must be NULL); a task gets its
 * cgr_task_desc.arg_data copied (a pointer arg is refused).  Values move through shared
 * memory (memfd segments, nothing in /dev/shm); its doorbells are shared
 * futexes, so the control path costs what it costs between threads.
 *
 * Graphs may mix thread and process workers.  On a process worker, a
 * graph may hold plain tasks, stream tasks (its compute stream is a sim
 * stream in that process), host edges, constants, and collectives and
 * device edges on the CPU communicator (its shared state in the graph's
 * segment too), overlap on or off, and traces (a worker process records
 * into the segment; cgr_compiled_write_trace reads it).  Values of every
 * kind cross, lists too (a reader in another process relocates a list's
 * tables to its own mapping, each item checked to lie in its slot).  Not
 * yet: NCCL, device tasks, CUDA devices and a communicator of the
 * caller's (refused at compile, saying so).
 *
 * Failures: a worker process that dies (a crash, kill -9, a task calling
 * exit) is seen at once through its pidfd, and so is one whose task ends
 * its thread (pthread_exit: the process stops its graph, saying so, and
 * exits with status 1): see "A worker that dies" below; the error values
 * name the worker (u.error.worker) and their messages say how it died:
 * "worker p0 (pid 4511) died: killed by signal 9 (Killed)", "...died:
 * exited with status 7", "...died: its thread exited inside task t
 * (execution 3)".  A worker that died before the driver noticed is no
 * different: whatever the driver sends it then (a compile, a destroy)
 * finds it dead and returns CGR_EPEERDEAD saying so, never a bare
 * -EPIPE.  A worker process that has not left a graph by the teardown
 * deadline (stuck in a task, stopped by SIGSTOP) is killed then
 * (teardown returns CGR_ESTUCK, by its deadline).  When the driver dies,
 * its worker processes exit at once (their control socket closes).
 * Nothing is left behind: no shared memory, descriptor, thread or
 * process.  Every shared segment is a memfd sealed against resizing
 * (F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_SEAL): no process holding it can
 * truncate it under another's mapping.
 */

/*
 * How a thread waits for what it needs next (cgr_compile_params.wait_mode).
 * Every mode first polls a few dozen times (about a microsecond).
 *
 * CGR_WAIT_ADAPTIVE spins up to spin_ns, yielding the core every few
 * microseconds, then parks; and it learns, per thread, when spinning does
 * not pay, from the clock reads the spin makes anyway (no system call,
 * no allocation):
 *  - CPU pressure: a spin that lost its core for more than 100 us (more
 *    runnable threads than cores: other programs, an inference server's
 *    own threads) burns the time slice the thread it waits for may need,
 *    and the scheduler wakes a thread that used more than its share
 *    late.  The thread then parks at once, like CGR_WAIT_BLOCK, and tries
 *    spinning again after 1 ms, then 2, 4 ... up to 1000 ms while losses
 *    continue (and at least 32 times the time the last loss took); the
 *    first spin that yields and gets its core back at once ends the
 *    pressure.
 *  - Misses: a wait (its condition on its thread) whose spins keep
 *    running out parks at once; every 16th such wait spins, and any
 *    that is over within spin_ns, spinning or parked, counts against
 *    the misses.
 * With free cores it costs what CGR_WAIT_BUSY costs; oversubscribed, what
 * CGR_WAIT_BLOCK costs (perf/wait_modes measures both).
 *
 * CGR_WAIT_BUSY never parks (it yields now and then, so that more
 * spinners than cores still progress): the lowest latency with free
 * cores, a time slice per hand-off when cores are short.
 * CGR_WAIT_BLOCK parks at once: a kernel wake-up per hand-off, never a
 * burnt core.
 */
enum cgr_wait_mode {
	CGR_WAIT_ADAPTIVE = 0, /* spin up to spin_ns, then park (default);
				  learns when not to spin */
	CGR_WAIT_BUSY = 1,     /* never park; yield now and then */
	CGR_WAIT_BLOCK = 2,    /* park at once */
};

typedef struct cgr_worker_params {
	size_t size;
	const char *name;	/* copied; NULL: "worker<N>" */
	int kind;		/* enum cgr_worker_kind */
	int cpu;		/* pin the reactor thread to this CPU; -1: don't */
	cgr_worker_init_fn init; /* may be NULL */
	cgr_worker_fini_fn fini; /* may be NULL */
	void *arg;		/* passed to init and fini */
	/* The worker's device (enum cgr_device_kind: CGR_DEVICE_NONE, the
	 * default, CGR_DEVICE_SIM, or a CUDA index): where the compute
	 * stream of its stream tasks lives (NONE: the sim device), where
	 * its CGR_TASK_DEVICE outputs are allocated, and its GPU as an NCCL
	 * rank (its NCCL collectives run on CUDA streams of it).  The CPU
	 * communicator's streams stay sim streams. */
	int device;
	/* A process worker's arg: these bytes (at most 64 KiB, else
	 * -EINVAL), copied into its process (init and fini get a pointer
	 * to the copy; arg must be NULL); the same for a worker on another
	 * rank.  A thread worker of this process ignores them (its init
	 * gets arg), but arg_len over 64 KiB, or with arg_data NULL, is
	 * -EINVAL for every worker. */
	const void *arg_data;
	size_t arg_len;
	/* A process worker started by something else (mpirun, a service
	 * manager, a container; NULL: cgr starts this program again): the
	 * abstract Unix address (a name under 64 bytes) where cgr waits,
	 * up to join_timeout_ns (0: 30 s), for a process of this user to
	 * join: one that calls cgr_worker_main with CGR_WORKER=<join_addr>
	 * in its environment, or cgr_worker_join(join_addr, ...).  It must
	 * be this program (the same exports and build of cgr: a graph's
	 * layout is checked).  Not reaped when it ends: not our child. */
	const char *join_addr;
	int64_t join_timeout_ns;
	/* Where the worker runs: -1 (the default) or this process's rank in
	 * the context's job: here; another rank of the job
	 * (cgr_ctx_params.job): a thread of the process serving that rank
	 * (cgr_job_serve), kind CGR_WORKER_THREAD only, its init and fini
	 * found there by name in the exports (as a process worker's), arg
	 * NULL (arg_data is copied there).  See "Across hosts". */
	int rank;
} cgr_worker_params;
#define CGR_WORKER_PARAMS_INIT                                             \
	{ sizeof(cgr_worker_params), NULL, CGR_WORKER_THREAD, -1, NULL, NULL, \
	  NULL, -1, NULL, 0, NULL, 0, -1 }

/*
 * Starts a worker thread and runs init on it.  Blocks until init returned.
 * Returns 0, -EINVAL, -ENODEV (no such CUDA device), -ENOMEM, -EAGAIN (no
 * thread), init's code, CGR_EPEERDEAD (init ended its thread:
 * pthread_exit; a worker process that died, or exited, before its init
 * returned), -ETIMEDOUT (join_addr: nobody joined within
 * join_timeout_ns; a process cgr started that did not join within 10 s),
 * -ENOENT (a process worker's, or another rank's, program does not
 * export the init or fini: every process must have the same exports),
 * -EPROTO (a process other than the one cgr started connected, or a
 * malformed control message), or CGR_EHOSTLOST (rank: that host is
 * lost).  The log says why.
 */
int cgr_worker_create(cgr_ctx *ctx, const cgr_worker_params *p,
		      cgr_worker **out);

/*
 * Stops the worker: runs fini on its thread and joins it, waiting at most
 * timeout_ns (negative: 1 s; 0 abandons any worker whose thread has not
 * already ended, even an idle one).  Returns -EBUSY (and does nothing) while a live compiled graph
 * uses the worker; CGR_ESTUCK if the thread did not stop in time (it is then
 * abandoned: it frees what it owns when it returns); CGR_EPEERDEAD if the
 * worker had died (below; its remains are freed all the same), or its fini
 * ended its thread; CGR_EHOSTLOST if it is on a lost host (not waited
 * for).  A worker process runs fini within the same timeout, or is killed
 * (0: killed at once, fini not run).  The handle stays valid, marked
 * destroyed, until the context is destroyed; a second call is a no-op
 * returning 0.
 */
int cgr_worker_destroy(cgr_worker *w, int64_t timeout_ns);

/*
 * A worker that dies: a worker process that ends unasked (a crash, kill
 * -9, exit in a task), or a worker thread (of this process or of a
 * worker process) that a task ends: pthread_exit, or a cancellation,
 * instead of returning.  The graph it serves stops at once, never
 * hangs: every execution in flight comes out of cgr_ref_get as
 * CGR_EPEERDEAD error values saying which worker died and how ("worker b
 * died: its thread exited inside task t (execution 3)"), cgr_execute
 * returns CGR_EPEERDEAD, the log says it, and teardown (which returns 0)
 * and destroy work as usual; other workers of the graph leave it and
 * serve other graphs.  The dead worker serves no more: compiling a graph
 * with it, or running one eagerly, fails with CGR_EPEERDEAD (the graph's
 * errmsg says how it died; a process worker, dead or alive, never runs
 * eagerly: -ENOTSUP), and cgr_worker_destroy returns CGR_EPEERDEAD.
 * A worker thread that ends inside a task still leaves its program,
 * runs its fini (on that thread, as it ends) and frees what cgr held for
 * it, so nothing leaks; one that ends inside init fails
 * cgr_worker_create (CGR_EPEERDEAD).  A worker process whose task ends
 * its thread stops its graph with that reason and exits (status 1).  Work
 * a stream task enqueues (cgr_stream_launch_host) runs on the stream's own
 * thread and must not end it.
 */

/* The name given at creation. */
const char *cgr_worker_name(const cgr_worker *w);

/* A process worker's process id (0 for a thread worker, or once the
 * process was reaped by cgr_worker_destroy). */
int cgr_worker_pid(const cgr_worker *w);

/* ------------------------------------------------------------------ */
/* Values                                                             */
/* ------------------------------------------------------------------ */

enum cgr_value_kind {
	CGR_VALUE_NONE = 0,   /* empty (zero bytes) */
	CGR_VALUE_BYTES = 1,  /* data, len */
	CGR_VALUE_TENSOR = 2, /* a DLPack tensor: CPU, or CUDA (kDLCUDA) */
	CGR_VALUE_ERROR = 3,  /* an error: its origin and message (below) */
	CGR_VALUE_LIST = 4,   /* items: bytes and tensors mixed (at most 64) */
};

#define CGR_MAX_LIST 64

#define CGR_MAX_NDIM 8

/*
 * A value.  Values cgr hands out (task inputs, ref_get outputs) point into
 * cgr's channel buffers: read-only, valid for the task call or until
 * cgr_ref_release.  Values a task or caller hands in are copied (unless
 * they already start where cgr_task_output_buffer's buffer starts).
 *
 * Error values keep their root cause.  An error arises at one place, its
 * origin: a task that failed (returned non-zero, or output an error
 * value), or a collective or device edge that failed by itself (its
 * members disagreed, its communicator failed; a device edge is named
 * "<producer output>->device").  code is the origin's code (the failing
 * task's cgr_task_set_error code, CGR_EMISMATCH for a disagreement, ...),
 * and u.error names the origin: task (the task's or collective's name),
 * worker (the worker it ran on) and execution (the execution's number,
 * cgr_task_seq).  Every value the error reaches downstream, through
 * tasks it skips, host and device edges and collectives on any member,
 * carries the same origin, unchanged.  msg starts with the origin,
 *   "task T on worker W, execution E: <text>"
 * (a collective says its kind instead of "task": "allreduce ar on worker
 * w1, execution 7: ...") and ends with the path the error took, after
 * "; via ", hop by hop ("; via task b, broadcast b->device, allreduce
 * g"): at most CGR_ERROR_MAX_HOPS hops, and only what fits its buffer, a
 * cut message ending in "...".  The origin is never cut (names longer
 * than 63 bytes are, in task, worker and msg alike).  The text is at
 * most 512 bytes.  task, worker and msg point into cgr's buffers, valid
 * as long as the value.  An error value that did not arise in a
 * task (an argument or constant handed in, a corrupt buffer, a worker
 * process that died) has task "" and, unless a worker is the cause,
 * worker "" too; its msg is its text.  Handed in (an argument, a
 * constant, a task's output), only kind, code and msg are read (a code
 * of 0 becomes CGR_ETASK, a NULL msg the empty text): a task
 * that outputs an error value is its origin.
 */
typedef struct cgr_value {
	int kind; /* enum cgr_value_kind */
	int code; /* CGR_VALUE_ERROR: the error code of its origin */
	union {
		struct {
			const void *data;
			size_t len;
		} bytes;
		/* contiguous (strides NULL or compact; any strides with
		 * zero elements); data + byte_offset + its size must not
		 * wrap around the address space */
		DLTensor tensor;
		struct {
			const char *msg;    /* NUL-terminated: origin, text, path */
			const char *task;   /* origin: task or collective ("") */
			const char *worker; /* origin: its worker ("") */
			uint64_t execution; /* origin: the execution */
		} error;
		struct {
			const struct cgr_value *items; /* bytes or tensors */
			size_t n;
		} list;
	} u;
} cgr_value;

/* The error's fields never make a value larger than a tensor's. */
#ifdef __cplusplus
static_assert(sizeof(((cgr_value *)0)->u.error) <= sizeof(DLTensor),
	      "cgr_value.u.error fits the union");
#else
_Static_assert(sizeof(((cgr_value *)0)->u.error) <= sizeof(DLTensor),
	       "cgr_value.u.error fits the union");
#endif

/* The most hops an error value's message lists after its origin. */
#define CGR_ERROR_MAX_HOPS 8

static inline cgr_value cgr_value_bytes(const void *data, size_t len)
{
	cgr_value v;
	v.kind = CGR_VALUE_BYTES;
	v.code = 0;
	v.u.bytes.data = data;
	v.u.bytes.len = len;
	return v;
}

/*
 * A contiguous CPU tensor value: code is a DLDataTypeCode (kDLInt,
 * kDLUInt, kDLFloat, kDLBfloat), bits the element width, shape ndim long
 * (it must outlive the value's use).
 */
static inline cgr_value cgr_value_tensor(void *data, int code, int bits,
					 int ndim, int64_t *shape)
{
	cgr_value v;
	v.kind = CGR_VALUE_TENSOR;
	v.code = 0;
	v.u.tensor.data = data;
	v.u.tensor.device.device_type = kDLCPU;
	v.u.tensor.device.device_id = 0;
	v.u.tensor.ndim = ndim;
	v.u.tensor.dtype.code = (uint8_t)code;
	v.u.tensor.dtype.bits = (uint8_t)bits;
	v.u.tensor.dtype.lanes = 1;
	v.u.tensor.shape = shape;
	v.u.tensor.strides = NULL;
	v.u.tensor.byte_offset = 0;
	return v;
}

/*
 * A list of bytes and tensors moving as one value (Ray's direct_return=
 * False): over a device-transport edge its tensors go through the
 * communicator and its bytes through host memory.
 */
static inline cgr_value cgr_value_list(const cgr_value *items, size_t n)
{
	cgr_value v;
	v.kind = CGR_VALUE_LIST;
	v.code = 0;
	v.u.list.items = items;
	v.u.list.n = n;
	return v;
}

/* Bytes a tensor's elements occupy (contiguous), or 0 if its rank or
 * shape is malformed, its element (bits x lanes) is not whole bytes, or
 * that overflows size_t.  It checks nothing else (data, device, dtype
 * code: cgr_execute does).  Any thread. */
size_t cgr_tensor_nbytes(const DLTensor *t);

/*
 * Where cgr takes a value in (cgr_execute's arguments, a task's outputs,
 * cgr_graph_const), every size is computed with overflow checks: a
 * tensor's elements times their size, a list's items each padded to 64
 * bytes plus its tables.  A value is malformed (CGR_EBADVALUE) if its
 * kind, a shape, dtype or strides are wrong (a dtype is wrong if its code
 * is none DLPack defines, 0 to 16 as of DLPack 1.1, or its bits or lanes
 * are 0, or bits times lanes is not whole bytes), its data is NULL while it
 * has bytes, or its data range (data + byte_offset + size) wraps around
 * the address space; else it is too big (CGR_ETOOBIG) if its size
 * exceeds the buffer, as one whose size overflows always does.
 */

/* ------------------------------------------------------------------ */
/* Graphs                                                             */
/* ------------------------------------------------------------------ */

typedef struct cgr_graph cgr_graph;
typedef struct cgr_node cgr_node;
typedef struct cgr_task_ctx cgr_task_ctx;
typedef struct cgr_compiled cgr_compiled;

/*
 * A task.  in[0..nin) are the values of its input nodes for this execution
 * (read-only, valid during the call).  It fills out[0..nout) (pre-set to
 * CGR_VALUE_NONE) and returns 0; or it returns non-zero, optionally after
 * cgr_task_set_error, and every output of this execution becomes an error
 * value whose origin is this task (see cgr_value).  An error value among
 * the inputs skips the call: it is forwarded to every output (the first
 * such input's, origin kept, the task added to its path).  An output that
 * is malformed becomes a CGR_EBADVALUE error value, one larger than its
 * buffer a CGR_ETOOBIG one (see "Values"); the other outputs and
 * executions are unaffected.  Runs on the worker's thread; a task that
 * ends that thread (pthread_exit) kills its worker (see "A worker that
 * dies").
 *
 * What a task may call: the cgr_task_* calls with its own tc, the value
 * helpers (cgr_value_*, cgr_tensor_nbytes, cgr_dtype_size), cgr_strerror
 * and cgr_err_name, streams, events, futures and communicators (its
 * compute stream: cgr_task_stream), and the calls of graphs that run on
 * other workers: it may build, compile, run and destroy them while the
 * driver thread does the same with others (compiles of one context run
 * one at a time; each graph and compiled graph is used by one thread at
 * a time).  It must not drive its own graph, which waits for it:
 * cgr_execute, cgr_ref_get, cgr_ref_release and cgr_compiled_teardown of
 * its own graph (and cgr_graph_execute_eager of the graph it runs in
 * eagerly) return -EDEADLK, cgr_compiled_destroy of it and
 * cgr_ctx_destroy of its context are refused (logged, nothing freed),
 * cgr_worker_destroy of a worker its compiled graph uses returns -EBUSY,
 * and a compile using its own worker -EBUSY.
 */
typedef int (*cgr_task_fn)(cgr_task_ctx *tc, void *state,
			   const cgr_value *in, size_t nin, cgr_value *out,
			   size_t nout);

/* Process workers' exports (see "Process workers" above). */
typedef struct cgr_export {
	const char *name; /* unique in the table; NULL ends it */
	cgr_task_fn task; /* a task function, or NULL */
	/* Worker callbacks (a pair under one name), or NULL. */
	cgr_worker_init_fn init;
	cgr_worker_fini_fn fini;
} cgr_export;

/*
 * Call at the top of main with main's arguments and the exports.  In a
 * process that cgr started as a worker (CGR_WORKER is set in its
 * environment: set but empty or over 63 bytes is malformed), runs the
 * worker until its
 * context lets it go (or dies), then exits the process: it never returns
 * there (CGR_WORKER is gone from its environment by the time its init and
 * tasks run).  Anywhere else it returns 0 at once.  A worker that cannot
 * start (a malformed environment, a wrong protocol version, its init or
 * a function not exported) exits with status 1 after saying why on
 * stderr; the context that started it gets the reason too.
 */
int cgr_worker_main(int argc, char **argv, const cgr_export *exports);

/*
 * Runs this process as the worker that waits at join_addr
 * (cgr_worker_params.join_addr), for a process started by something
 * else: joins (retrying while nobody listens yet, up to 10 s), runs the
 * worker until its context lets it go, and returns 0 then; 1 if it could
 * not join or start, or the context died (stderr says why).
 */
int cgr_worker_join(const char *join_addr, const cgr_export *exports);

/*
 * Across hosts.  A graph may span hosts: start the program once per host
 * (or per GPU) with a PMIx launcher (Open MPI's mpirun, which cgr uses as
 * a launcher only, never linking libmpi, or Slurm's srun --mpi=pmix).
 * Every process joins the job (cgr_job_join).  One of them, the driver
 * (rank 0, or cgr_job_params.driver), creates a context with the job
 * (cgr_ctx_params.job) and workers on any rank (cgr_worker_params.rank),
 * builds, compiles and executes graphs as on one host; every other
 * process calls cgr_job_serve, which hosts the workers the driver creates
 * there and runs their share of each graph, until the driver leaves the
 * job.  The graph API does not change: a task or an edge does not know on
 * which host its peer is.
 *
 * Between hosts, values cross by value: bytes, CPU tensors, lists of
 * them and error values, copied into the reader host's slot (the data
 * straight from the writer's slot into the reader's, by UCX rendezvous
 * when large), once per host however many of its workers read it.  Pointers and file descriptors inside a value mean nothing
 * on the other host.  Collective nodes may have members on several hosts
 * (see cgr_graph_collective), over values or on a communicator across
 * hosts (cgr_coll_params.comm).  A worker on another host may own a
 * CUDA device (cgr_worker_params.device): that rank loads the GPU
 * libraries this context was given (cgr_ctx_params.cudart_path and
 * nccl_path: for a worker there that owns a device, at most 398 bytes
 * together, else cgr_worker_create gives -EINVAL; NULL: by soname
 * there), and a device it lacks fails cgr_worker_create with -ENODEV.
 * Stream tasks, device tasks, and collectives and device-transport
 * edges (CGR_TRANSPORT_DEVICE) through NCCL whose members are all on one
 * host run there as on one host.  CUDA tensors stay on the host that
 * made them: read there, and carried on to other hosts as host values
 * once a stream task there copied them to host memory, or moved through
 * NCCL across the hosts: by tasks calling an NCCL communicator across
 * hosts (cgr_comm_create), by collective nodes over them (on such a
 * communicator, the caller's or one the compile makes: each member reads
 * its own input on its host, see cgr_graph_collective), and over
 * device-transport edges (CGR_TRANSPORT_DEVICE: its producer, a
 * CGR_TASK_DEVICE task, and its readers on several hosts get an NCCL
 * communicator across them at compile, freed with the compiled graph;
 * a list over such an edge is an error value, -ENOTSUP, on every
 * reader).  Refused at compile with -ENOTSUP, saying so: a CUDA tensor
 * read on another host otherwise (by a task without a device edge, by a
 * collective's member it does not feed, as a graph output), a host
 * tensor over a device edge across hosts, process workers in a graph
 * that has workers on other hosts, eager execution.  Within a host, rings and shared memory as always: only
 * values whose reader is on another host travel.
 *
 * Transport: UCX active messages, one UCX worker per process (its link).
 * A thread that writes a value for another host sends it itself; a
 * thread that waits for one (a worker, the driver in cgr_ref_get) moves
 * the UCX worker itself while it spins, and one parked worker at a time
 * sleeps on the UCX worker's event fd in its own io_uring (a message for
 * it wakes it directly).  One thread per process does the rest (control
 * messages, heartbeats, deadlines, rendezvous transfers) and receives
 * while no other thread does: it waits on io_uring with the event fd
 * armed.  wait_mode and spin_ns below are that thread's.  UCX_TLS is
 * honoured among host-memory transports: device transports named there
 * (cuda_copy, cuda_ipc, gdr_copy, rocm_*) are left out, and
 * cgr_job_transports says what was used; it must name a network
 * transport (tcp, rc, ud, dc: shared memory and self alone cannot tell a
 * peer's failure, and cgr_job_join refuses a setting that leaves UCX only
 * those with -EINVAL).  UCX_NET_DEVICES picks the
 * interfaces.  The job's processes find each other through PMIx (each
 * publishes its UCX address and host with Put, Commit and a Fence).
 *
 * Failures: UCX reports a peer process that ended (in milliseconds), not
 * a host that went silent (a cut cable, a frozen host).  So every link
 * sends each peer it talks to (and every serving rank its driver, from
 * the start) a heartbeat when it has sent it nothing for heartbeat_ns, and declares a peer lost once nothing arrived from it for
 * deadline_ns (default 3 s; on a slow link raise it: a link that moves
 * nothing for that long is taken for lost).  It checks every
 * min(heartbeat_ns / 2, deadline_ns / 30): a silent host is known within
 * the deadline plus that (3.1 s by default).  A lost host's endpoints are
 * closed by force; every graph with a worker there fails at once: each
 * pending execution completes with error values (CGR_EHOSTLOST, naming
 * the host and why), further executes fail with CGR_EHOSTLOST, teardown
 * and cgr_worker_destroy of its workers do not wait for it.  A serving
 * rank whose driver is lost ends its graphs and returns CGR_EHOSTLOST.
 * Every message carries the job's epoch and its graph's id: what arrives
 * for a graph that is gone (a late message of an old graph) is counted
 * (cgr_job_stats) and dropped.  Deployments on TCP should also know
 * net.ipv4.tcp_retries2 and UCX_KEEPALIVE_INTERVAL (TCP itself gives up
 * on a silent peer only after minutes).
 */
typedef struct cgr_job_params {
	size_t size;
	cgr_log_fn log_fn; /* the job's diagnostics (NULL: dropped) */
	void *log_arg;
	int log_level;
	int driver;	     /* the driver's rank (default 0) */
	/* 0 picks each default (in parentheses); a negative value, or an
	 * unknown wait_mode, is -EINVAL. */
	int64_t deadline_ns; /* a peer not heard from this long is lost (3 s) */
	int64_t heartbeat_ns; /* sent to a peer after this long without
				 anything for it (deadline / 6); at most
				 deadline / 2 (-EINVAL): heartbeats must
				 arrive well within the deadline */
	int fence_timeout_s; /* the bootstrap's fence (60 s) */
	int wait_mode;	     /* enum cgr_wait_mode: how the link waits */
	int64_t spin_ns;     /* CGR_WAIT_ADAPTIVE's spin (50 us) */
} cgr_job_params;
#define CGR_JOB_PARAMS_INIT                                                  \
	{ sizeof(cgr_job_params), NULL, NULL, CGR_LOG_WARN, 0, 0, 0, 0,     \
	  CGR_WAIT_ADAPTIVE, 0 }

/*
 * Joins the job this process was started in (p may be NULL: defaults).
 * Not started by a PMIx launcher (or in a build without PMIx and UCX):
 * a job of one rank, this process, its driver, so that the same program
 * runs on one host unchanged.  Collective: every rank of the job calls
 * it.  Blocks until every rank joined (the fence) or fence_timeout_s.
 * Returns 0, -EINVAL (also: UCX_TLS names no network transport, only
 * shared memory and self, which cannot tell a peer's failure, or leaves
 * UCX none, as "^tcp" on a host without RDMA does), -ENOMEM,
 * -ETIMEDOUT, -EIO (PMIx or UCX failed: the log says why; also when the
 * launcher's variables PMIX_NAMESPACE or PMIX_RANK are set but its PMIx
 * server cannot be reached, rather than a job of one per process),
 * -ENOENT (libpmix.so.2 or libucp.so.0 cannot be loaded under a
 * launcher), -EBUSY (this process is in a job already: one per process,
 * until cgr_job_leave, and after a loss until the last job's PMIx ended:
 * see cgr_job_leave).  Any thread; the job is then this process's.
 */
int cgr_job_join(const cgr_job_params *p, cgr_job **out);
/* This process's rank, the job's size, and its driver's rank (-EINVAL
 * for a NULL job). */
int cgr_job_rank(const cgr_job *j);
int cgr_job_size(const cgr_job *j);
int cgr_job_driver(const cgr_job *j);
/* The host rank runs on, as the launcher named it ("" if unknown, or
 * for a rank not in the job); valid while the job lives. */
const char *cgr_job_host(const cgr_job *j, int rank);
/* What UCX uses between hosts, e.g. "UCX_TLS=tcp,self (left out:
 * cuda_copy); resources: self/memory0 tcp/eth0" ("" in a job of one). */
const char *cgr_job_transports(const cgr_job *j);
/*
 * On every rank but the driver's: hosts the workers the driver creates
 * here and runs their share of the driver's graphs, their tasks and
 * init/fini found by name in exports (as for process workers), until the
 * driver leaves the job (0), or is lost (CGR_EHOSTLOST).  -EINVAL on the
 * driver's rank.  Blocks; the calling thread serves.
 */
int cgr_job_serve(cgr_job *j, const cgr_export *exports);
typedef struct cgr_job_stats {
	uint64_t data_sent, data_received; /* values to and from hosts */
	uint64_t control;		   /* control messages sent */
	uint64_t heartbeats;		   /* heartbeats sent */
	uint64_t late;	   /* dropped: of a graph that is gone, or garbled */
	uint64_t lost;	   /* peers declared lost */
	/* Bytes of values' data to and from hosts (a value read on a host
	 * only in part, e.g. an alltoall member's block, moves that part). */
	uint64_t bytes_sent, bytes_received;
	/* Bytes of communicators' operations to and from hosts (their data
	 * and agreement records, see cgr_comm_create), and of those received
	 * the data UCX wrote straight into the caller's buffer (the second
	 * half of a split allreduce or broadcast, a hierarchical
	 * allreduce's result chunks, a chained broadcast's chunks, an
	 * allgather's, alltoall's, gather's or scatter's blocks of 128 KiB
	 * or more: data of 64 KiB or more, into one rank's buffer of the
	 * receiving host, see cgr_comm_create). */
	uint64_t comm_bytes_sent, comm_bytes_received, comm_bytes_direct;
} cgr_job_stats;
void cgr_job_stats_get(const cgr_job *j, cgr_job_stats *out);
/* Leaves the job: the driver first tells every serving rank to return,
 * in two steps so that no rank takes another's exit for a loss: each
 * rank answers that it is ending (the driver waits for the answers at
 * most cgr_job_params.deadline_ns, and takes a rank that did not answer
 * by then for lost), then its cgr_job_serve returns.
 * Then the link stops, UCX and PMIx end.  Contexts using the job must be
 * destroyed first.  Never waits on a lost host, nor long on the launcher
 * after a loss (this rank's, or one the driver saw): a launcher that ends
 * the whole job once a rank died (Open MPI's mpirun without
 * --enable-recovery) may never answer PMIx_Finalize, which is then
 * awaited 250 ms at most and goes on in a thread of its own. */
void cgr_job_leave(cgr_job *j);

typedef struct cgr_task_desc {
	size_t size;
	const char *name; /* copied; used in error messages */
	cgr_task_fn fn;
	void *arg;	  /* cgr_task_arg() returns it */
	size_t max_out_bytes; /* per output, at most 2^40 (1 TiB); 0: the
				 compile default; raised to 512 and
				 rounded up to a multiple of 64 (the
				 limit then), as max_value_bytes */
	unsigned flags;	      /* enum cgr_task_flags */
	/* Instead of arg: these bytes (at most 1 MiB), copied now, and into
	 * the process of a process worker; cgr_task_arg() returns the copy
	 * (64-byte aligned), which lives as long as the compiled graph. */
	const void *arg_data;
	size_t arg_len;
} cgr_task_desc;
#define CGR_TASK_DESC_INIT \
	{ sizeof(cgr_task_desc), NULL, NULL, NULL, 0, 0, NULL, 0 }

enum cgr_task_flags {
	/*
	 * The task's work runs on its worker's compute stream (a GPU task's
	 * kernels; on the sim device, host functions and copies).  The
	 * function still runs on the worker's thread: it enqueues the work on
	 * cgr_task_stream() and describes its outputs (kind, dtype, shape,
	 * length) before returning.  Their data is produced by that work:
	 * written into cgr_task_output_buffer() by the stream, or, for an
	 * output that points elsewhere, copied from there by the stream after
	 * the task's work (the source must stay valid until then).  Lists
	 * are refused (a CGR_EBADVALUE error value).  Inputs made by an earlier stream
	 * task of the same worker may still be in flight when the function
	 * runs: read them only from work on the stream.  Every other input
	 * is complete.  Who consumes the outputs joins the stream: the next
	 * stream task by stream order, a communication stream by
	 * stream-wait-event, the worker thread by its reactor.  With overlap
	 * off (cgr_compile_params.overlap) the worker waits for the stream
	 * after each such task.  Work the function enqueued on a sim compute
	 * stream may run only once the function returns (short work runs on
	 * the worker's thread: cgr_compile_params.inline_ns), or once it
	 * waits or polls through cgr: cgr_future_wait, cgr_future_test,
	 * cgr_event_query, cgr_stream_synchronize, a communicator's call on
	 * its thread, cgr_group_end.  A function that waits for that work by
	 * other means (a flag a host function sets) may wait forever.
	 */
	CGR_TASK_STREAM = 1u << 0,
	/*
	 * The task's outputs are CUDA tensors on its worker's CUDA device
	 * (cgr_worker_params.device): each output's buffers are allocated
	 * there at compile (max_out_bytes, or the compile default, per
	 * execution in flight), cgr_task_output_buffer() returns device
	 * memory, and a tensor output pointing elsewhere (device or host
	 * memory) is copied there: by the compute stream after the task's
	 * work for a stream task, with a synchronous cudaMemcpy otherwise.
	 * Bytes and error values stay in host memory.  A list keeps its
	 * bytes items in host memory (give them host pointers) and has its
	 * tensor items copied to the output's device buffer, at the offsets
	 * the list's layout gives them (cudaMemcpy; a stream task's output
	 * is not a list); over a device edge its bytes travel through host
	 * memory and its tensors in one NCCL broadcast.
	 * Collectives and device edges whose inputs are all such outputs,
	 * over workers on distinct CUDA devices, go through NCCL.  A worker
	 * without a CUDA device fails the compile.  Read over the host
	 * transport (a task on another worker, or the driver's
	 * cgr_ref_get), such an output is a CUDA tensor that refers to the
	 * producer's device buffer (unified addressing, one process), valid
	 * for the task call or until cgr_ref_release: copy it from there
	 * (cudaMemcpy), or give the edge CGR_TRANSPORT_DEVICE for a copy on
	 * the reader's device.
	 */
	CGR_TASK_DEVICE = 1u << 1,
};

/* Creates an empty graph.  Returns 0, -EINVAL, -ENOMEM. */
int cgr_graph_create(cgr_ctx *ctx, cgr_graph **out);

/*
 * Frees the graph and its nodes.  A compiled graph keeps its own copy of
 * what it needs, so this may be called right after cgr_graph_compile.
 */
void cgr_graph_destroy(cgr_graph *g);

#define CGR_INPUT_ALL (-1)

/*
 * An input node: argument `index` of each execution, or CGR_INPUT_ALL for
 * all arguments (a task given it receives every argument, in order, at that
 * position of its inputs).  The number of arguments an execution takes is
 * the highest index used plus one (1 if only CGR_INPUT_ALL is used; an
 * index no task reads fails compile with CGR_EUNUSEDARG, while a
 * CGR_INPUT_ALL node no task reads is ignored).
 */
int cgr_graph_input(cgr_graph *g, int index, cgr_node **out);

/*
 * A constant node: v is copied now and given to every execution.
 * Returns 0, -EINVAL (a NULL argument, a malformed value, see "Values",
 * or a CUDA tensor: a constant is host data), CGR_ETOOBIG (more than
 * 2^40 bytes, 1 TiB, or a size that overflows; cgr_graph_errmsg says),
 * CGR_ECOMPILED, -ENOMEM.
 */
int cgr_graph_const(cgr_graph *g, const cgr_value *v, cgr_node **out);

/*
 * A task bound to worker w, with nin inputs (nodes of this graph; an entry
 * may be NULL and set later with cgr_node_set_input) and nout outputs: out
 * receives one node per output.  Returns 0, -EINVAL (also for
 * max_out_bytes over 2^40 or arg_len over 1 MiB), -ENOMEM.
 */
int cgr_graph_task(cgr_graph *g, cgr_worker *w, const cgr_task_desc *t,
		   cgr_node *const *in, size_t nin, cgr_node **out,
		   size_t nout);

/* Sets input i of the task that produces node n to src. */
int cgr_node_set_input(cgr_node *n, size_t i, cgr_node *src);

enum cgr_transport {
	CGR_TRANSPORT_AUTO = 0,	  /* host for CPU values */
	CGR_TRANSPORT_HOST = 1,	  /* shared-memory buffer + ring */
	CGR_TRANSPORT_DEVICE = 2, /* payload over a communicator */
};

enum cgr_edge_flags {
	/* The value's shape and dtype never change: they are agreed on the
	 * first execution whose value is not an error only; a later change
	 * is an error value (an error value goes through as it is).  For a
	 * tensor value: a list's items are not checked. */
	CGR_EDGE_STATIC_SHAPE = 1u << 0,
	/* The communicator of the edge (default: NCCL when the value is a
	 * device output, CGR_TASK_DEVICE, and its producer and readers own
	 * distinct CUDA devices; else the CPU communicator).  Asking for one
	 * that cannot carry the edge fails the compile, naming why. */
	CGR_EDGE_CPU = 1u << 1,
	CGR_EDGE_NCCL = 1u << 2,
};

/*
 * How the value of task output n travels to tasks on other workers.  With
 * CGR_TRANSPORT_DEVICE the payload moves through a communicator of the
 * producer and its readers, sent once for all of them (a broadcast); shape
 * and dtype are agreed over host memory first.  The value must be a tensor
 * (or bytes) and have at least one reader on another worker (compile says
 * which node otherwise).  Graph outputs always travel by host.
 */
int cgr_node_set_transport(cgr_node *n, int transport, unsigned flags);

/* Overlap for the device edge carrying task output n (enum
 * cgr_overlap_mode).  Returns 0, -EINVAL. */
int cgr_node_set_overlap(cgr_node *n, int mode);

/* Declares the graph's outputs (once): task (or collective) outputs;
 * an input or a constant is refused (-EINVAL: route it through a task).
 * Returns 0, -EINVAL, -EALREADY. */
int cgr_graph_output(cgr_graph *g, cgr_node *const *outs, size_t n);

/* The node's name as used in messages: a task's output "task" (its name)
 * when the task has one output, "task#port" (port from 0) when it has
 * several; an input "input[i]" ("input[*]" for CGR_INPUT_ALL); a constant
 * "const#id" (id: the node's number in its graph).  Valid while the graph
 * lives. */
const char *cgr_node_name(const cgr_node *n);

/*
 * The last error message of a graph call (compile validation names the
 * nodes involved here).  cgr_graph_compile and cgr_graph_execute_eager
 * clear it first ("" after they succeed); other calls that succeed leave
 * it as it was.  Valid until the next call on g.
 */
const char *cgr_graph_errmsg(const cgr_graph *g);

typedef struct cgr_compile_params {
	size_t size;
	uint32_t max_inflight;	   /* executions not yet released; default 8,
				      at most 4096 (-EINVAL) */
	size_t max_value_bytes;	   /* the largest value of an output or
				      argument buffer (a limit: reserved
				      address space, resident as values use
				      it); default 64 KiB; a smaller one is
				      raised to 512 (an error value's room),
				      as each task's max_out_bytes, and
				      every one is rounded up to a multiple
				      of 64, which is then the limit; at
				      most 2^40 (1 TiB; -EINVAL) */
	int64_t submit_timeout_ns; /* a bound on cgr_execute's writes to
				      its rings, which never wait while
				      executions stay within max_inflight
				      (-ETIMEDOUT past it: cannot happen
				      but to a corrupted graph); negative
				      (the default): 10 s */
	int64_t get_timeout_ns;	   /* what cgr_ref_get's negative timeout
				      means (0: no wait); negative (the
				      default): 10 s */
	int wait_mode;		   /* enum cgr_wait_mode */
	int64_t spin_ns;	   /* adaptive spin before parking; negative
				      (the default): 50 us */
	uint32_t trace_events;	   /* per worker, kept from the start; 0: off;
				      at most 2^24 (-EINVAL) */
	int overlap;		   /* 1: collectives run on communication
				      streams per worker, beside compute,
				      and stream tasks are not waited for
				      (CGR_TASK_STREAM); 0: off; else
				      -EINVAL */
	/* Modelled communication, for planning and benchmarks: every
	 * collective and device-edge transfer also takes this long once its
	 * members agreed (the payload still moves), on its stream with
	 * overlap, on the worker thread without.  0: off; at most 10 s
	 * (negative or more: -EINVAL). */
	int64_t sim_comm_ns;
	/* CPU streams: a collective's job (overlap) or a stream task's work
	 * on a simulated compute stream whose last run took less than this
	 * runs on the worker thread instead, where overlap off runs it: a
	 * handoff to a parked stream thread costs a kernel wakeup, more than
	 * a short operation takes.  Longer ones, and the first run, go to
	 * their stream.  -1: default 20 us; 0: always the stream; at most
	 * 1 s (another negative value or more: -EINVAL).  An invalid
	 * parameter's compile error message names it. */
	int64_t inline_ns;
} cgr_compile_params;
#define CGR_COMPILE_PARAMS_INIT                                          \
	{ sizeof(cgr_compile_params), 0, 0, -1, -1, CGR_WAIT_ADAPTIVE, -1, 0, \
	  0, 0, -1 }

/*
 * Validates and compiles the graph: channels allocated, one program per
 * worker, programs started.  Validation failures return a CGR_E* code
 * (placement refusals an errno: -EINVAL, e.g. a device task on a worker
 * without a CUDA device; -ENOTSUP for what a kind of worker cannot do
 * yet) and cgr_graph_errmsg names the nodes.  A graph compiles once (CGR_ECOMPILED).
 * A worker serves one live compiled graph at a time (-EBUSY).  Resources
 * that run out give their errno (-ENOMEM, -EAGAIN: no stream thread,
 * -EMFILE, ...), every failure with its reason in cgr_graph_errmsg.  With
 * workers in other processes or on other hosts, each compiles its share:
 * CGR_EPEERDEAD (a worker that died), CGR_ESTUCK (a worker process that
 * did not answer within 10 s, stopped or hung: it is killed),
 * CGR_EHOSTLOST (a lost host), -EPROTO (a program there that does not
 * export a task's function: every process must have the same exports).
 */
int cgr_graph_compile(cgr_graph *g, const cgr_compile_params *p,
		      cgr_compiled **out);

/* ------------------------------------------------------------------ */
/* Execution                                                          */
/* ------------------------------------------------------------------ */

typedef uint64_t cgr_ref;

/*
 * Starts one execution with args[0..nargs) (copied into cgr's buffers
 * before return).  Returns CGR_ENARGS for a wrong count, CGR_EBADVALUE
 * for a malformed argument and CGR_ETOOBIG for one larger than its buffer
 * (see "Values": nothing is started then), CGR_ECAPACITY when max_inflight
 * executions are not yet released (a count: however old the unreleased
 * ones are; never blocks for that), CGR_ECLOSED after teardown, -EDEADLK
 * from a task of this graph, CGR_EWORKERGONE once a worker's device
 * failed (the log names it; the executions already in flight still
 * complete, their device work as CGR_EDEVICE error values on every
 * member).  Never
 * allocates (an argument over 512 bytes makes the pages it writes of its
 * slot's reserved big area resident, the first time only: see "Values"
 * in the README).  A CUDA tensor argument (kDLCUDA) is passed by reference
 * (no size limit): it must stay valid until the execution's outputs were
 * got.  Only to workers of this process: in a graph with process workers
 * or workers on other hosts, or inside a list, it is CGR_EBADVALUE.
 */
int cgr_execute(cgr_compiled *c, const cgr_value *args, size_t nargs,
		cgr_ref *out);

/*
 * Waits up to timeout_ns (negative: cgr_compile_params.get_timeout_ns,
 * 10 s by default; 0: not at all) for execution ref and fills
 * outs[0..nouts) (nouts must equal the number of graph outputs).  Refs may be got in any order,
 * and again: results of other executions that arrive meanwhile are kept
 * (at most max_inflight executions exist at once, so that is the bound).
 * An output may be an error value: the call still returns 0.  The values
 * stay valid, unchanged, until cgr_ref_release, however many executions
 * run meanwhile.  Returns -ETIMEDOUT (try again later), CGR_EUNKNOWNREF,
 * CGR_ENARGS, CGR_ECLOSED (after teardown; or teardown began in another
 * thread while this call waited, and the outputs were not all in),
 * -EDEADLK from a task of this graph.
 */
int cgr_ref_get(cgr_compiled *c, cgr_ref ref, int64_t timeout_ns,
		cgr_value *outs, size_t nouts);

/*
 * Releases execution ref: its buffers may be reused and it no longer
 * counts against max_inflight.  A ref not yet got is waited for first (up
 * to the get timeout).  Returns 0 (also after teardown, which released
 * everything, or when teardown began in another thread during the wait),
 * CGR_EUNKNOWNREF, -ETIMEDOUT, -EDEADLK from a task of this graph.
 *
 * Threads: cgr_execute, cgr_ref_get and cgr_ref_release are the driver
 * thread's, one at a time.  cgr_compiled_teardown may be called from
 * another thread while the driver thread is in any of them: a blocked
 * get or release returns at once, as said above.  cgr_compiled_destroy
 * races with nothing.  A task calling these for its own graph would wait
 * for itself: they return -EDEADLK (another graph, on other workers, is
 * fine).
 */
int cgr_ref_release(cgr_compiled *c, cgr_ref ref);

/*
 * Tears the compiled graph down: executions in flight are cancelled,
 * workers leave its program and are free for another graph.  Waits at most
 * timeout_ns (negative: 1 s; less than 20 ms: 20 ms, the least time given
 * idle workers to leave).  A worker thread still finishing its streams'
 * work at the deadline (its tasks returned) is not abandoned: it leaves
 * when that work ends (queued stream work is not cut short) and a graph
 * compiled meanwhile starts on it then.  A worker thread stuck in a task past the
 * deadline is reported through the log and abandoned: CGR_ESTUCK is
 * returned, the worker can no longer be used, and what the stuck task may
 * touch stays allocated until it returns.  A worker process that has not
 * left by the deadline (stuck in a task, or stopped: SIGSTOP) is reported
 * and killed then (CGR_ESTUCK; the call returns by the deadline, plus
 * the kill itself).  A second call (or one racing the first from another
 * thread) is a no-op returning 0.  It wakes a get or release blocked in
 * the driver thread at once.  From a task of this graph: -EDEADLK,
 * nothing done.
 * CPU communicators are aborted at once (a member waiting in one for a
 * member that left returns; one the caller gave a collective node too:
 * its later operations fail with -ECANCELED), but for one across hosts: its members'
 * waits see the teardown themselves, and only one cut short aborts it
 * (else it stays whole for the next graph).  NCCL communicators are
 * not: a leaving worker first finishes the NCCL operations it enqueued
 * (for half the timeout, its peers do the same), so a clean teardown
 * leaves them whole (finalized when freed); only one with an operation
 * still on a device then (waiting for a stuck member) is aborted.
 */
int cgr_compiled_teardown(cgr_compiled *c, int64_t timeout_ns);

/* Teardown (1 s) if not done, then frees c.  NULL is a no-op.  From a
 * task of this graph it is refused (logged through the context's log
 * hook, nothing freed). */
void cgr_compiled_destroy(cgr_compiled *c);

/* ---- pictures ---- */

/*
 * Writes the operations the workers recorded (compile with trace_events >
 * 0; each worker keeps its first trace_events operations) as Chrome trace
 * JSON, one track per worker: open it in Perfetto (ui.perfetto.dev) or
 * chrome://tracing.  Call it after cgr_compiled_teardown for a complete
 * picture: before, the records of operations still finishing (a worker
 * records an operation after its effect) may be missing.  Returns 0,
 * -EINVAL, -ENODATA (tracing off), or -errno.
 */
int cgr_compiled_write_trace(const cgr_compiled *c, const char *path);
/* The graph as Graphviz DOT: one cluster per worker, collectives joining
 * their members, edges labelled with their transport.  Returns 0, -EINVAL
 * (NULL), or -errno (the file: -ENOENT, -ENOSPC, ...); so does the next. */
int cgr_graph_write_dot(const cgr_graph *g, const char *path);
/* Each worker's program (READ, COMPUTE, COLL, WRITE in order) as DOT, with
 * the rings between workers and the collectives' rendezvous. */
int cgr_compiled_write_dot(const cgr_compiled *c, const char *path);

/* Number of graph outputs and arguments of one execution. */
size_t cgr_compiled_noutputs(const cgr_compiled *c);
size_t cgr_compiled_nargs(const cgr_compiled *c);

/* ------------------------------------------------------------------ */
/* Streams, events and futures (device layer)                         */
/* ------------------------------------------------------------------ */

/*
 * A stream runs operations in order, asynchronously to the thread that
 * enqueues them, with CUDA's semantics.  CGR_DEVICE_SIM streams run on an
 * executor thread each (events are stream positions); a CUDA index gives
 * a CUDA stream (the cuda backend, built when the CUDA toolkit's headers
 * are found; the runtime is loaded at first use), whose events are CUDA
 * events without timing.  One thread enqueues on a stream at a time; an
 * idle sim stream's thread sleeps (no CPU).  Enqueueing blocks only while
 * 1024 operations of the stream are not finished yet (as CUDA's launch
 * queue): queued ones, the one running, and waits for events all count.  A stream
 * may wait for an event of another backend (it polls the record it saw,
 * 1 to 100 us apart) and for any future.
 * On CUDA streams, work left at destroy finishes in the background (CUDA
 * cannot drop it), and the CPU communicator's operations are refused:
 * they would block on their peers inside host functions, which CUDA may
 * run one at a time.  Such a call still takes its turn on the calling
 * thread (so every peer's operation fails too, with -ENOTSUP), then
 * returns -ENOTSUP, no future made: like any call with s NULL, it waits
 * for its peers to reach the operation.
 *
 * A device (CGR_DEVICE_SIM of one context, or a CUDA index) can fail for
 * good: the sticky error.  Every later call on its streams and events
 * returns it, queued work is dropped, and every pending future of an
 * operation on its streams completes with it (CGR_EDEVICE).
 *
 * Streams, events, futures and communicators hold a reference on their
 * context: they may be destroyed or released after cgr_ctx_destroy.
 */
typedef struct cgr_stream cgr_stream;
typedef struct cgr_event cgr_event;
typedef struct cgr_future cgr_future;

enum cgr_device_kind {
	CGR_DEVICE_NONE = -1,
	CGR_DEVICE_SIM = -2, /* >= 0: a CUDA device index */
};

/* priority: a hint; lower is more urgent, as in CUDA (clamped to the
 * device's range).  Returns 0, -EINVAL (CGR_DEVICE_NONE, bad arguments),
 * -ENODEV (a CUDA index with no such device: no cuda backend in this
 * build, no CUDA runtime or driver, or too few devices; the context's log
 * says which, at CGR_LOG_INFO), -ENOMEM, -EAGAIN (no thread). */
int cgr_stream_create(cgr_ctx *ctx, int device, int priority,
		      cgr_stream **out);
/* Waits (up to 1 s) for queued work, then drops what is left (it never
 * runs; internal work such as a pending collective fails with -ECANCELED
 * and aborts its communicator; an event recorded after dropped work
 * reports -ECANCELED, and a stream waiting for it goes on) and frees.  A thread stuck in a host
 * function is abandoned (it frees the stream when the function returns).
 * Returns within about 1.1 s.  NULL is a no-op. */
void cgr_stream_destroy(cgr_stream *s);
/* Waits until all work enqueued so far ran.  0, -ETIMEDOUT, or the sticky
 * error of the stream's device.  Negative timeout: no deadline. */
int cgr_stream_synchronize(cgr_stream *s, int64_t timeout_ns);
/* Enqueues fn(arg) on the stream (CUDA's cudaLaunchHostFunc).  0,
 * -EINVAL, or the sticky error. */
int cgr_stream_launch_host(cgr_stream *s, void (*fn)(void *arg), void *arg);
/* Enqueues a copy of n bytes (host memory for the sim device; overlapping
 * ranges are allowed). */
int cgr_stream_memcpy_async(cgr_stream *s, void *dst, const void *src,
			    size_t n);

int cgr_event_create(cgr_ctx *ctx, cgr_event **out);
void cgr_event_destroy(cgr_event *e);
/* Captures the stream's current position; the event completes when the
 * stream passes it.  An event never recorded never completes.  Recording
 * again moves the event; waits enqueued before keep the record they saw. */
int cgr_event_record(cgr_event *e, cgr_stream *s);
/* 1 completed, 0 not yet (or never recorded), negative: the device's
 * sticky error, or -ECANCELED once the stream passed the record but
 * dropped work before it (cgr_stream_destroy). */
int cgr_event_query(cgr_event *e);
/* Work enqueued on s after this waits for e's current record; never
 * blocks the caller.  An event never recorded has no record to wait for:
 * a no-op, as cudaStreamWaitEvent.  A CUDA stream waits for an event of
 * another backend on the device (a stream memory operation, never a
 * blocking host function): -ENOTSUP on a device without stream memory
 * operations, the context's log saying why once per device. */
int cgr_stream_wait_event(cgr_stream *s, cgr_event *e);

/* Futures returned by asynchronous operations (collectives, ...).  Any
 * thread may test or wait; the holder releases it once. */
/* 1 done (0 result), 0 pending, negative: the operation's error. Never
 * blocks.  -EINVAL if f is not a future of this layer. */
int cgr_future_test(cgr_future *f);
/* Waits up to timeout_ns (negative: 10 s): 0, -ETIMEDOUT, or the
 * operation's error. */
int cgr_future_wait(cgr_future *f, int64_t timeout_ns);
/* Work enqueued on s afterwards waits for f (device side, no blocking);
 * a no-op if f is already complete.  f may be released meanwhile.  On a
 * CUDA stream the wait is a stream memory operation that a thread of
 * cgr's releases when f completes (never a blocking host function): on
 * a device without stream memory operations a pending f gives -ENOTSUP,
 * the context's log saying why once per device. */
int cgr_future_stream_wait(cgr_future *f, cgr_stream *s);
/* Gives the future back, pending or not; it must not be used
 * afterwards.  NULL is a no-op. */
void cgr_future_release(cgr_future *f);

/* ------------------------------------------------------------------ */
/* Communicators and collectives                                      */
/* ------------------------------------------------------------------ */

typedef struct cgr_comm cgr_comm;

typedef enum cgr_dtype {
	CGR_INT8 = 0,
	CGR_UINT8,
	CGR_INT16,
	CGR_UINT16,
	CGR_INT32,
	CGR_UINT32,
	CGR_INT64,
	CGR_UINT64,
	CGR_FLOAT16,
	CGR_BFLOAT16,
	CGR_FLOAT32,
	CGR_FLOAT64,
	CGR_DTYPE_COUNT
} cgr_dtype;

typedef enum cgr_redop {
	CGR_SUM = 0,
	CGR_PROD,
	CGR_MIN,
	CGR_MAX,
	CGR_AVG,
	CGR_REDOP_COUNT
} cgr_redop;

enum cgr_backend {
	CGR_BACKEND_AUTO = 0,
	CGR_BACKEND_CPU = 1,  /* shared memory among ranks of one host */
	CGR_BACKEND_NCCL = 2,
};

/* Bytes of one element, 0 for an unknown dtype. */
size_t cgr_dtype_size(cgr_dtype dt);

/* The most ranks a communicator (and members a collective node) has. */
#define CGR_MAX_RANKS 256

/*
 * Creates a communicator of n ranks (at most CGR_MAX_RANKS).  members
 * (may be NULL) binds rank i to worker members[i] (distinct, non-NULL,
 * this context's, not destroyed: else -EINVAL; thread workers: a process
 * worker is -ENOTSUP, its tasks could never reach a communicator of this
 * process); without members, any n threads may drive the ranks (one
 * thread per rank at a time).  CGR_BACKEND_AUTO picks CPU.  Returns 0,
 * -EINVAL, -ENOTSUP, -ENOMEM, -EOPNOTSUPP (backend not built), -ENODEV
 * (NCCL: the library or a device is missing; the log says which).
 *
 * CGR_BACKEND_NCCL: rank i is members[i]'s CUDA device
 * (cgr_worker_params.device; without members, CUDA device i), each rank
 * its own GPU (NCCL refuses two ranks on one: -EINVAL).  libnccl is
 * loaded when a context first makes one (cgr_ctx_params.nccl_path, else
 * libnccl.so.2; version 2.18 or later; gather, scatter and alltoall are
 * NCCL's own from 2.28.3, grouped send/recv before); the communicator is
 * nonblocking, its ranks made together.  Operations take CUDA device
 * buffers and a CUDA stream of the rank's device (s NULL: the rank's own
 * stream, waited for).  The ranks' agreement (below) runs over host
 * memory before NCCL sees the operation, with the operation's deadline.
 * Each future completes from a CUDA event recorded once NCCL took the
 * operation; a worker's reactor polls it, and NCCL's asynchronous error
 * with it (also while ranks wait inside a collective that will never
 * complete).  A failure (an asynchronous NCCL error, an operation past
 * its deadline, a rank's failed CUDA device, an abort) fails the
 * communicator as a whole: every pending and later operation of every
 * rank fails fast with one code, the message names the rank and NCCL's
 * text, and its ranks are aborted off the caller's thread (ncclCommAbort,
 * never ncclCommDestroy after a failure).  The code: NCCL's result
 * (ncclRemoteError -EPIPE, ncclSystemError and ncclInternalError -EIO,
 * ncclInvalidArgument and ncclInvalidUsage -EINVAL, ncclUnhandledCudaError
 * and a code newer than the nccl.h cgr was built against CGR_EDEVICE),
 * -ETIMEDOUT past a deadline, CGR_EDEVICE when a rank's device failed
 * (the sticky error of its stream, seen when an operation is issued there
 * or under a pending one), -ECANCELED after cgr_comm_abort.  Invalid
 * arguments are -EINVAL first, on a failed device too.  Freed whole, it
 * is finalized.
 */
int cgr_comm_create(cgr_ctx *ctx, cgr_worker *const *members, size_t n,
		    int backend, cgr_comm **out);
/* Fails every pending and future operation with -ECANCELED and wakes every
 * waiter.  Any thread.  Idempotent. */
int cgr_comm_abort(cgr_comm *c);
/* Frees the communicator; no operation may be pending (if one is, the
 * communicator is aborted first and waited for up to 1 s; so are tasks
 * that hold it, cgr_task_comm, and threads waiting inside a call on it,
 * which return -ECANCELED).  NULL is a no-op. */
void cgr_comm_destroy(cgr_comm *c);
int cgr_comm_size(const cgr_comm *c);
/* The message of the last failed operation on this rank ("" if none).  A
 * call refused at once, for arguments no peer needs to hear of (a send or
 * receive whose peer is this rank, outside a group, or out of range),
 * returns -EINVAL and leaves the message as it was. */
const char *cgr_comm_errmsg(const cgr_comm *c, int rank);
/* Its id: never 0, unique in the process (and, across hosts, in the
 * job); 0 for NULL.  A task finds a communicator by it (cgr_task_comm). */
uint64_t cgr_comm_id(const cgr_comm *c);

/*
 * Members on several hosts (a driver's context, cgr_job_join; members
 * that are thread workers here or workers on other hosts): the
 * communicator spans hosts.  Each host with members gets a share of it
 * under the same id before cgr_comm_create returns; a task on a member
 * finds it there with cgr_task_comm and calls the operations with its
 * rank (on any host, a rank whose worker is elsewhere is -EINVAL).
 * Process workers: -ENOTSUP.  CGR_BACKEND_NCCL (every member owns a CUDA
 * device, else -EINVAL): the driver's NCCL makes the unique id and
 * publishes it through PMIx (PMIx_Put and PMIx_Commit under
 * "cgr.nccl.<communicator id>"; each host reads it with PMIx_Get and
 * PMIX_GET_REFRESH_CACHE, or, where its launcher cannot fetch it, takes
 * the copy in the driver's control message, logged at CGR_LOG_INFO),
 * every host initialises its ranks from it (cgr_comm_create returns once all
 * ranks of all hosts joined; a host whose ranks fail to initialise
 * aborts the agreement's communicators below, so the others stop waiting
 * for them and cgr_comm_create fails at once with that host's failure,
 * not the -ECANCELED or -EPIPE it brought about elsewhere; a rank that
 * never joins fails it past 30 s), and before every launch the ranks
 * agree over two CPU communicators across hosts as on one host (records
 * only; the data moves through NCCL), so the
 * semantics are those of an NCCL communicator on one host; a lost host
 * fails it (CGR_EHOSTLOST) once a rank polls it; a build without NCCL:
 * -EOPNOTSUPP.  Collective nodes may run on it (cgr_graph_collective).
 * The rest of this paragraph is the CPU backend's.  Every collective and
 * send/recv, same semantics as on one host (agreement before data moves,
 * poisons, CGR_EMISMATCH, -EINVAL for what one rank sees, groups: their
 * collectives in call order, then every send posted before any receive
 * waits; streams: the operation runs on the stream's executor, a rank's
 * operations in call order across streams and its own thread), at most
 * 1 GiB per message.  Each rank sends each host
 * with other ranks one message: its agreement record and, once, what of
 * its input that host's ranks need (the whole input for allreduce and
 * allgather, each one's block for reducescatter and alltoall, to the
 * root's host only for reduce and gather, from the root only for
 * broadcast and scatter; cgr_job_stats counts the bytes); an allreduce
 * of 16 KiB or more (and a count of at least the ranks) runs as a
 * reduce-scatter, rank q folding block q, then an allgather of the
 * blocks, so a host sends 2 (n - 1) / n inputs, not n - 1; with several
 * ranks on a host, hierarchically: each host's lowest rank folds its
 * host's inputs, these leaders reduce-scatter and allgather the h
 * partial results (a host sends 2 (h - 1) / h inputs, however many ranks
 * it has) and the other ranks take the blocks from them, each block in
 * chunks (an eighth of it, 256 KiB to 1 MiB) that move on as soon as
 * they are folded, so the host's fold, the network and the copies out
 * overlap.  A broadcast of
 * 128 KiB or more over three hosts or more is a chain, after the
 * records' exchange: the root sends it in chunks (64 KiB to 1 MiB) to
 * one rank of the next host, which passes each chunk on to the next
 * host as soon as it has it, and so on (each host receives it once and
 * sends it once at most), each of these ranks giving it to the other
 * ranks of its host; one of 16 KiB or more otherwise: a scatter from the
 * root, then an allgather.  An allgather, alltoall, gather or scatter
 * whose blocks (a rank's input, or one block of it) are 128 KiB or more
 * sends its data after the records' exchange (an alltoall's and a
 * scatter's blocks each to its own rank; so a mismatch fails it before
 * any data moves).  Data of
 * 64 KiB or more for another host leaves straight from the rank's send
 * or receive buffer (no copy on the way out; UCX rendezvous), and the
 * operation does not return before UCX is done with it.  Data that is
 * sent only once every record is in (the blocks of a split allreduce's
 * or broadcast's second half, a chain's chunks, those blocks)
 * arrives straight in the
 * receive buffer (UCX writes it there: the operation says where before
 * its own record leaves; cgr_job_stats.comm_bytes_direct) when it was
 * sent so (64 KiB or more) to a host with one rank of the communicator;
 * where several ranks of a host take the same data (an allgather's
 * inputs, a split broadcast's blocks, a hierarchical allreduce's result
 * chunks at the host's leader), in one of their buffers, the others
 * copying it from there (that rank's operation returns once they did);
 * any other data is copied once out of the message it came in (before
 * the records agree it may not touch the caller's buffer).
 * Reductions fold in rank order (rank 0's input op rank 1's op ...), and
 * a hierarchical allreduce folds each host's ranks in rank order, then
 * the hosts' results in the order of their lowest ranks (averages sum,
 * then divide once); either way the result is bit-identical on every
 * member, and integer results do not depend on the layout.  A
 * hierarchical allreduce of float16 or bfloat16 rounds each host's
 * partial result to its type, then the final result (as NCCL's ring
 * rounds at every step), where the other algorithms round once.  Failures: a
 * host of the communicator lost fails its pending and later operations with
 * CGR_EHOSTLOST (the message names the host), within the job's deadline;
 * cgr_comm_abort, or an operation past its deadline (-ETIMEDOUT there),
 * fails every host's with -ECANCELED.  cgr_comm_destroy on the driver
 * frees every host's share (the driver's leaving does too); operations
 * still waiting there are aborted (-ECANCELED) and waited for, 1 s at
 * most.
 */

/*
 * Collectives, NCCL's argument order and semantics: counts are elements;
 * in place when send == recv (allreduce, reduce and broadcast on the
 * root); allgather: send == recv + rank * sendcount; reducescatter:
 * recv == send + rank * recvcount; gather on the root: send == recv +
 * root * sendcount; scatter on the root: recv == send + root * recvcount.
 * alltoall is never in place.  Any other overlap is -EINVAL.  CGR_AVG sums
 * then divides by the number of ranks (integers: the sum wraps in the
 * element type, as CGR_SUM's, then integer division); float16 and
 * bfloat16 reduce in float and round to nearest even.  CGR_MIN and
 * CGR_MAX compare with < and > as C does: a NaN, and which zero of -0.0
 * and 0.0 wins, depend on the fold order, as in NCCL.  On one host (the
 * CPU communicator) a small operation folds in rank order; a larger one
 * is cut in a chunk per rank, and each chunk is folded from one rank's
 * input (its owner's; a reduce's, the root's) then the others' in rank
 * order.  Floating-point results may so differ in the last bits from a
 * rank-order fold; every rank gets the same bits.
 *
 * Every rank calls the same operations in the same order; a rank's
 * operations run in call order even across streams.  Each call is
 * enqueued on stream s (NULL: run on the calling thread, returning the
 * operation's result when done) and yields a future in *out (may be NULL;
 * with s NULL it is already complete; a call that returns an error yields
 * none, *out untouched).  A count of 0 is valid (buffers may then be
 * NULL) when every rank passes 0.  With s NULL, a CPU communicator's
 * operation has no deadline: a rank waits for its peers as long as they
 * take (cgr_comm_abort or cgr_comm_destroy from another thread releases
 * it with -ECANCELED; on a stream, cgr_future_wait bounds the caller's
 * wait); NCCL's operations have a deadline of 60 s (-ETIMEDOUT, the
 * communicator aborted).  Before data moves the ranks agree
 * on count, dtype, op and root: a mismatch fails the operation on every
 * rank with CGR_EMISMATCH and cgr_comm_errmsg names the ranks and what
 * differed; the communicator stays usable.  Invalid arguments seen by one
 * rank (NULL buffer, bad overlap, unknown dtype, op or root) return
 * -EINVAL on that rank at once and fail the operation on every peer with
 * -EINVAL too, never leaving them waiting; only a NULL c or a rank (or
 * peer) out of range returns -EINVAL with no effect.  A stream whose
 * device failed makes the operation fail with the sticky error on every
 * rank.  After cgr_comm_abort every operation fails with -ECANCELED.
 */
int cgr_allreduce(cgr_comm *c, int rank, const void *send, void *recv,
		  size_t count, cgr_dtype dt, cgr_redop op, cgr_stream *s,
		  cgr_future **out);
/* recv holds nranks * sendcount elements, rank r's at r * sendcount. */
int cgr_allgather(cgr_comm *c, int rank, const void *send, void *recv,
		  size_t sendcount, cgr_dtype dt, cgr_stream *s,
		  cgr_future **out);
/* send holds nranks * recvcount elements; rank r gets block r reduced. */
int cgr_reducescatter(cgr_comm *c, int rank, const void *send, void *recv,
		      size_t recvcount, cgr_dtype dt, cgr_redop op,
		      cgr_stream *s, cgr_future **out);
/* recv is used on the root only. */
int cgr_reduce(cgr_comm *c, int rank, const void *send, void *recv,
	       size_t count, cgr_dtype dt, cgr_redop op, int root,
	       cgr_stream *s, cgr_future **out);
/* send is used on the root only. */
int cgr_broadcast(cgr_comm *c, int rank, const void *send, void *recv,
		  size_t count, cgr_dtype dt, int root, cgr_stream *s,
		  cgr_future **out);
/* The root's recv holds nranks * sendcount elements. */
int cgr_gather(cgr_comm *c, int rank, const void *send, void *recv,
	       size_t sendcount, cgr_dtype dt, int root, cgr_stream *s,
	       cgr_future **out);
/* The root's send holds nranks * recvcount elements. */
int cgr_scatter(cgr_comm *c, int rank, const void *send, void *recv,
		size_t recvcount, cgr_dtype dt, int root, cgr_stream *s,
		cgr_future **out);
/* send and recv hold nranks * count elements; block j goes to rank j. */
int cgr_alltoall(cgr_comm *c, int rank, const void *send, void *recv,
		 size_t count, cgr_dtype dt, cgr_stream *s, cgr_future **out);
/* Point to point; matched in call order per (sender, receiver) pair.  A
 * send completes once the receiver copied the data (rendezvous).  Counts
 * and dtypes of a matched pair must agree (else CGR_EMISMATCH on both
 * sides).  Sending to or receiving from oneself needs a group (-EINVAL
 * outside one). */
int cgr_send(cgr_comm *c, int rank, const void *buf, size_t count,
	     cgr_dtype dt, int peer, cgr_stream *s, cgr_future **out);
int cgr_recv(cgr_comm *c, int rank, void *buf, size_t count, cgr_dtype dt,
	     int peer, cgr_stream *s, cgr_future **out);
/*
 * Group: operations this rank calls between start and end are fused into
 * one (sends and receives of a group never deadlock each other, whatever
 * their order; collectives of the group run first, in call order).
 * Groups nest; the outermost end issues them.  All operations of a group
 * use the same stream (or all NULL): a call on another stream fails with
 * -EINVAL, and at the end so does every operation of the group, on the
 * peers too (their matching operations), before any of its data moves.  Inside a group the
 * per-call futures complete together; cgr_group_end's *out (may be NULL)
 * completes when all of them did, with the first error.  With s NULL the
 * outermost cgr_group_end runs the group and returns its first error.
 */
int cgr_group_start(cgr_comm *c, int rank);
int cgr_group_end(cgr_comm *c, int rank, cgr_future **out);

/* ------------------------------------------------------------------ */
/* Collective nodes                                                   */
/* ------------------------------------------------------------------ */

enum cgr_coll_kind {
	CGR_COLL_ALLREDUCE = 1,
	CGR_COLL_ALLGATHER,
	CGR_COLL_REDUCESCATTER,
	CGR_COLL_REDUCE,
	CGR_COLL_BROADCAST,
	CGR_COLL_GATHER,
	CGR_COLL_SCATTER,
	CGR_COLL_ALLTOALL,
};

typedef struct cgr_coll_params {
	size_t size;
	const char *name;     /* copied; used in messages */
	int kind;	      /* enum cgr_coll_kind */
	cgr_redop op;	      /* reducing kinds */
	int root;	      /* rank (index in members) for rooted kinds */
	cgr_comm *comm;	      /* NULL: one made at compile per member set
				 (members on several hosts: over values, or
				 for an allreduce of 1 MiB or more one
				 across hosts; device tensors: an NCCL one
				 across hosts; see cgr_graph_collective);
				 it must outlive the compiled graphs.  A
				 CPU one of one host is aborted by the
				 graph's teardown (-ECANCELED from then
				 on: see cgr_compiled_teardown), not by
				 eager runs.  On one host its ranks need
				 not follow members' order (each member
				 drives the rank of its index); across
				 hosts they must */
	/* Agree once: on the first execution whose inputs are all tensors
	 * that agree (an execution with an error value or a mismatch
	 * agrees again next time).  A member whose shape (or dtype) later
	 * changes gets an error value on every member for that execution
	 * (CGR_EMISMATCH, e.g. "... rank 1 changed its static shape from
	 * [4] int32 to [5] int32"): on the CPU communicator that member
	 * poisons the operation, which fails everywhere before any data
	 * moves; on NCCL every member moves the agreed count (the
	 * changed one from a scratch buffer) and then all of them compare
	 * everybody's description, posted before the launch (no wait).  A
	 * member's error value reaches every member as it is (its origin's
	 * code, not CGR_EMISMATCH): on the CPU communicator that member
	 * poisons the operation and every member reads its error value. */
	int static_shape;
	size_t max_out_bytes; /* per output, at most 2^40 (1 TiB; -EINVAL);
				 0: the compile default; raised and
				 rounded as cgr_task_desc's */
	size_t ntensors;      /* allreduce, allgather: tensors per member,
				 fused into one operation; 0 or 1: one;
				 at most 64, and not with static_shape
				 (-EINVAL) */
	int overlap;	      /* CGR_OVERLAP_*: 0 follows the graph */
	/* enum cgr_backend of the communicator made at compile (comm NULL):
	 * AUTO is NCCL when every input is a device output (CGR_TASK_DEVICE)
	 * and the members own distinct CUDA devices, else CPU (members on
	 * several hosts: see comm above; CPU keeps them over values).
	 * Asking for one that cannot run it fails the compile, naming why
	 * (device tensors on the CPU communicator, host tensors or a shared
	 * GPU on NCCL). */
	int backend;
} cgr_coll_params;
#define CGR_COLL_PARAMS_INIT \
	{ sizeof(cgr_coll_params), NULL, 0, CGR_SUM, 0, NULL, 0, 0, 0, 0, 0 }

/* Per collective (cgr_coll_params.overlap) or device edge
 * (cgr_node_set_overlap): whether it runs on the communication stream. */
enum cgr_overlap_mode {
	CGR_OVERLAP_DEFAULT = 0, /* as cgr_compile_params.overlap */
	CGR_OVERLAP_ON = 1,
	CGR_OVERLAP_OFF = 2,
};

/*
 * A collective node over n distinct workers (at most CGR_MAX_RANKS); rank
 * i is members[i] (in[i] may come from any worker).  Values are CPU
 * tensors or bytes (bytes reduce as uint8, agree only with bytes of the
 * same length, and give bytes back), NCCL's shapes:
 *  - allreduce, allgather, reducescatter, reduce, gather, alltoall: nin ==
 *    n, in[i] is rank i's contribution;  broadcast, scatter: nin == 1, the
 *    root's value.
 *  - allreduce, allgather, reducescatter, broadcast, scatter, alltoall:
 *    nout == n, out[i] lives on rank i;  reduce, gather: nout == 1, on the
 *    root.
 *  - allgather and gather concatenate along dimension 0; reducescatter,
 *    scatter and alltoall split dimension 0 (it must divide by n).
 *  - Buckets: allreduce and allgather with ntensors = k > 1 take k tensors
 *    per member (in[r * k + j] is rank r's tensor j; out likewise), of one
 *    dtype (else each execution's outputs are -EINVAL error values), and
 *    move them all in one fused operation.
 * Before data moves, the members agree on dtype, shape and error state: a
 * mismatch makes every output of that execution an error value naming the
 * ranks and what differed (the collective its origin); an error value at
 * a member (the lowest such rank's) reaches every output of that
 * execution, its origin kept, the collective added to its path.
 *
 * Members on several hosts (cgr_worker_params.rank): the same kinds,
 * values and error values, on the CPU.  With comm NULL each member
 * receives every member's input it needs and computes its own outputs
 * (over values), except an allreduce of backend AUTO whose output
 * capacity (max_out_bytes, else the compile's max_value_bytes) is 1 MiB
 * or more: the compile makes it a communicator across hosts over its
 * members (as below, freed with the compiled graph; backend CPU keeps
 * it over values);
 * reductions fold the members' data in rank order (rank 0 op rank 1 op
 * ...), so every member's result is the same bits (integers: as on one
 * host; floating point may differ from one host's CPU communicator in
 * the last bits).  With comm a communicator across hosts (cgr_comm_create
 * on the driver over the members in their order, else -ENOTSUP at compile)
 * the members exchange their records in an allgather on it every
 * execution (with their inputs if at most 1 KiB: then that is the whole
 * move, folded as over values), then move larger data with its
 * algorithms (an allreduce of 16 KiB or more: reduce-scatter and
 * allgather, a leader per host; its fold order, see cgr_comm_create); a
 * member's error value reaches the others whole.  Teardown leaves it
 * whole for the next graph, unless members wait in it for one that never
 * comes: that aborts it (-ECANCELED from then on).  It must outlive the
 * graphs compiled with it.  With static_shape every execution is
 * still judged: a later change is CGR_EMISMATCH naming the rank, a
 * member's error value reaches every output with its own code.
 * Device tensors (inputs from CGR_TASK_DEVICE tasks) across hosts run
 * on an NCCL communicator across the hosts: comm one (cgr_comm_create
 * with CGR_BACKEND_NCCL over the members in their order), or with comm
 * NULL (backend AUTO or NCCL) one the compile makes over the members
 * (shared by the graph's nodes of the same members, freed with the
 * compiled graph; its making fails the compile if it fails, saying so).
 * Each member reads its own input only, on its host (an input made on
 * another host than its member's: -ENOTSUP).  Every execution
 * the members' records cross first, in an allgather over its CPU
 * communicator across the hosts, posted by the member's reactor and run
 * by a stream of its own (the worker never waits for other hosts), then
 * the data moves through NCCL as on one host; a member's error value
 * reaches the others whole; static shapes: the lowest rank whose input
 * changed decides (its error value, or CGR_EMISMATCH), as NCCL's late
 * verdict does on one host.  Such a communicator serves collective
 * nodes, or tasks' calls, not both at once (the records of both would
 * share its CPU communicator).
 * Returns 0, -EINVAL, -ENOMEM.
 */
int cgr_graph_collective(cgr_graph *g, const cgr_coll_params *p,
			 cgr_worker *const *members, size_t n,
			 cgr_node *const *in, size_t nin, cgr_node **out,
			 size_t nout);

/* Allreduce of in[0..n), task outputs on n distinct workers (the
 * members, in that order).  out[i] is on in[i]'s worker. */
int cgr_graph_allreduce(cgr_graph *g, cgr_node *const *in, size_t n,
			cgr_redop op, cgr_comm *comm, cgr_node **out);

/* ------------------------------------------------------------------ */
/* Eager (non-compiled) execution                                     */
/* ------------------------------------------------------------------ */

/*
 * Eager execution runs a graph as it is, without compiling it, for
 * development and debugging: one execution per call, each task on its own
 * worker, collectives through the same communicators, the same values and
 * error values as compiled execution.  The driver runs the tasks one at a
 * time in the compiler's order (a collective on all its members at once),
 * so every intermediate value can be read afterwards
 * (cgr_graph_eager_value), a hook sees each task's inputs and outputs,
 * and a task's own failure names its inputs' shapes.  The same
 * cgr_task_ctx calls work.  A graph runs eagerly any number of times and
 * may then be compiled (after which eager runs are refused); it may
 * change between runs (nodes added, inputs moved, edges set: each run
 * sees the graph as it is then, validated as a compile would).  The first
 * run prepares it (buffers, communicators: what compiling does, freed
 * with the graph; again after a change, values of earlier runs gone).
 * Eager runs need the workers idle (-EBUSY while one serves a compiled
 * graph, or still runs a task of an eager run that returned CGR_ESTUCK),
 * and run on thread workers only, without NCCL (-ENOTSUP, saying so).  Cost: a thread hand-off per task, tens of
 * microseconds where compiled execution costs hundreds of nanoseconds.
 */
typedef struct cgr_eager_params {
	size_t size;
	/* Called on the caller's thread before (after 0) and after (after
	 * 1) each task, and each member's part of a collective, with its
	 * name and worker, its inputs and then its outputs (valid during
	 * the call). */
	void (*hook)(void *arg, int after, const char *name, cgr_worker *w,
		     const cgr_value *in, size_t nin, const cgr_value *out,
		     size_t nout);
	void *hook_arg;
	int64_t timeout_ns; /* per task; 0: the compile default (10 s) */
} cgr_eager_params;
#define CGR_EAGER_PARAMS_INIT { sizeof(cgr_eager_params), NULL, NULL, 0 }

/*
 * Runs one execution of g eagerly: args in, outs (values valid until the
 * next eager run or the graph's destruction).  Returns 0 (outs may hold
 * error values), -EINVAL, CGR_ENARGS, CGR_EBADVALUE and CGR_ETOOBIG (an
 * argument, as cgr_execute's), CGR_ECOMPILED, -EBUSY, -ENOTSUP,
 * -EDEADLK (from one of its own tasks), CGR_ESTUCK (a task did not finish
 * by its timeout: the graph runs eagerly no more; that task keeps what it
 * uses until it returns, even if the graph is destroyed meanwhile),
 * CGR_EPEERDEAD (a worker died, before or during the run: a task ended
 * its thread; cgr_graph_errmsg says how), or what preparing it returned
 * (cgr_graph_errmsg says why).
 */
int cgr_graph_execute_eager(cgr_graph *g, const cgr_value *args,
			    size_t nargs, cgr_value *outs, size_t nouts,
			    const cgr_eager_params *p);

/* Node n's value in the last eager run (valid as its outputs): 0,
 * -ENODATA (no run yet), -EINVAL. */
int cgr_graph_eager_value(cgr_graph *g, const cgr_node *n, cgr_value *out);

/* ------------------------------------------------------------------ */
/* Inside a task (worker thread only)                                 */
/* ------------------------------------------------------------------ */

/*
 * A buffer of at least `bytes` (64-byte aligned) where the task may build
 * output i directly: an output value whose data starts at it is not
 * copied (one built at an offset into it is moved to its start).  NULL if bytes exceeds the output's buffer.  Write no more than
 * `bytes` into it: up to 512 bytes it is the room right after the slot's
 * header, next to other slots; above, the slot's big area (address space
 * reserved for the output's whole capacity, its pages made resident the
 * first time they are written, then kept).  Not for the items of a list:
 * they are copied to their places in the list's layout, which would
 * overlap them.
 */
void *cgr_task_output_buffer(cgr_task_ctx *tc, size_t i, size_t bytes);

/* Sets the code and text of the error value a failing task produces (its
 * message: the origin, "task T on worker W, execution E: ", then the
 * text, at most 255 bytes); without it the code is the task's negative
 * return value, else CGR_ETASK, and the text cgr_strerror's. */
void cgr_task_set_error(cgr_task_ctx *tc, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* The worker's compute stream, for a CGR_TASK_STREAM task; NULL
 * otherwise.  Only the task's function enqueues on it (one thread at a
 * time), during the call. */
cgr_stream *cgr_task_stream(cgr_task_ctx *tc);

/* The task's desc.arg, the execution's sequence number, the worker. */
void *cgr_task_arg(const cgr_task_ctx *tc);
uint64_t cgr_task_seq(const cgr_task_ctx *tc);
cgr_worker *cgr_task_worker(const cgr_task_ctx *tc);
/* The communicator with this id (cgr_comm_id) whose member is this
 * task's worker, and the worker's rank in it: 0, -ENOENT (none here:
 * another context's, freed, or the worker is not a member), -ENOSPC (this
 * run holds 8 distinct communicators already, even for an unknown id),
 * -EINVAL.  The run holds it until the task
 * returns: cgr_comm_destroy from another thread meanwhile aborts it (the
 * task's operations fail with -ECANCELED) and waits for the task, 1 s at
 * most; the task itself may destroy it (then it must not use it).  A
 * graph's teardown does not abort it (it is the caller's, not the
 * graph's): a task blocked in it for a member that left stays there
 * until the communicator is aborted or destroyed, and teardown reports
 * it stuck (CGR_ESTUCK).  Across
 * hosts, the way a task reaches its share of a communicator the driver
 * made (pass the id in an input or arg_data). */
int cgr_task_comm(cgr_task_ctx *tc, uint64_t id, cgr_comm **out, int *rank);

#ifdef __cplusplus
}
#endif

#endif /* CGR_H */
