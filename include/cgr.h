/*
 * cgr.h: the public interface of cgr, a compiled-graph runtime.
 *
 * A static graph of tasks bound to long-lived workers is compiled once into
 * one fixed program per worker, then executed again and again.  Control
 * messages move over lock-free SPSC rings; each worker runs one reactor
 * thread that executes its program and parks when idle.
 *
 * Conventions (see DESIGN.md and STYLE.md):
 *  - Every fallible call returns int: 0, a negative errno, or a CGR_E* code
 *    (all negative).  cgr_strerror() names any of them.  Results come back
 *    through the last pointer argument, which is untouched on failure.
 *  - Parameter structs start with `size_t size`; initialise them with the
 *    matching _INIT macro so that later versions can grow them.
 *  - Timeouts are in nanoseconds: a negative timeout means "the default"
 *    (from the compile parameters), 0 means "do not wait", CGR_FOREVER
 *    waits without a deadline.
 *  - Threads: unless a prototype says otherwise, a context and everything
 *    built from it may be used by one driver thread at a time.  Task
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
	X(CGR_EBADVALUE, -10015, "value is malformed or of an unsupported kind")

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
	/* Never use io_uring: park reactors with futex system calls. */
	CGR_CTX_NO_IO_URING = 1u << 0,
};

typedef struct cgr_ctx_params {
	size_t size;
	cgr_log_fn log_fn; /* NULL: diagnostics are dropped */
	void *log_arg;
	int log_level;	   /* messages above this level are dropped */
	unsigned flags;	   /* CGR_CTX_* */
} cgr_ctx_params;
#define CGR_CTX_PARAMS_INIT \
	{ sizeof(cgr_ctx_params), NULL, NULL, CGR_LOG_WARN, 0 }

/*
 * Creates a context: the owner of workers, graphs and cgr's jemalloc arena.
 * p may be NULL for defaults.  Returns 0, -EINVAL (bad params), -ENOMEM.
 */
int cgr_ctx_create(const cgr_ctx_params *p, cgr_ctx **out);

/*
 * Destroys the context, its remaining compiled graphs (teardown with a 1 s
 * deadline each) and workers.  NULL is a no-op.  Blocks until done.
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
	CGR_WORKER_THREAD = 0, /* a thread of this process */
};

enum cgr_wait_mode {
	CGR_WAIT_ADAPTIVE = 0, /* spin spin_ns, then park (default) */
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
} cgr_worker_params;
#define CGR_WORKER_PARAMS_INIT \
	{ sizeof(cgr_worker_params), NULL, CGR_WORKER_THREAD, -1, NULL, NULL, NULL }

/*
 * Starts a worker thread and runs init on it.  Blocks until init returned.
 * Returns 0, -EINVAL, -ENOMEM, -EAGAIN (no thread), or init's code.
 */
int cgr_worker_create(cgr_ctx *ctx, const cgr_worker_params *p,
		      cgr_worker **out);

/*
 * Stops the worker: runs fini on its thread and joins it, waiting at most
 * timeout_ns.  Returns -EBUSY (and does nothing) while a live compiled graph
 * uses the worker; CGR_ESTUCK if the thread did not stop in time (it is then
 * abandoned: it frees what it owns when it returns).  The handle stays
 * valid, marked destroyed, until the context is destroyed; a second call is
 * a no-op returning 0.
 */
int cgr_worker_destroy(cgr_worker *w, int64_t timeout_ns);

/* The name given at creation. */
const char *cgr_worker_name(const cgr_worker *w);

/* ------------------------------------------------------------------ */
/* Values                                                             */
/* ------------------------------------------------------------------ */

enum cgr_value_kind {
	CGR_VALUE_NONE = 0,   /* empty (zero bytes) */
	CGR_VALUE_BYTES = 1,  /* data, len */
	CGR_VALUE_TENSOR = 2, /* a DLPack tensor (CPU in this version) */
	CGR_VALUE_ERROR = 3,  /* code + message, produced by a failing task */
};

#define CGR_MAX_NDIM 8

/*
 * A value.  Values cgr hands out (task inputs, ref_get outputs) point into
 * cgr's channel buffers: read-only, valid for the task call or until
 * cgr_ref_release.  Values a task or caller hands in are copied (unless
 * they already live in the buffer cgr_task_output_buffer returned).
 */
typedef struct cgr_value {
	int kind; /* enum cgr_value_kind */
	int code; /* CGR_VALUE_ERROR: the error code */
	union {
		struct {
			const void *data;
			size_t len;
		} bytes;
		DLTensor tensor; /* contiguous (strides NULL or compact) */
		struct {
			const char *msg; /* NUL-terminated */
		} error;
	} u;
} cgr_value;

static inline cgr_value cgr_value_bytes(const void *data, size_t len)
{
	cgr_value v;
	v.kind = CGR_VALUE_BYTES;
	v.code = 0;
	v.u.bytes.data = data;
	v.u.bytes.len = len;
	return v;
}

/* Bytes a tensor's elements occupy (contiguous), or 0 if malformed. */
size_t cgr_tensor_nbytes(const DLTensor *t);

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
 * value.  An error value among the inputs skips the call: it is forwarded to
 * every output.  Runs on the worker's thread.
 */
typedef int (*cgr_task_fn)(cgr_task_ctx *tc, void *state,
			   const cgr_value *in, size_t nin, cgr_value *out,
			   size_t nout);

typedef struct cgr_task_desc {
	size_t size;
	const char *name; /* copied; used in error messages */
	cgr_task_fn fn;
	void *arg;	  /* cgr_task_arg() returns it */
	size_t max_out_bytes; /* per output; 0: the compile default */
} cgr_task_desc;
#define CGR_TASK_DESC_INIT { sizeof(cgr_task_desc), NULL, NULL, NULL, 0 }

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
 * the highest index used plus one (1 if only CGR_INPUT_ALL is used).
 */
int cgr_graph_input(cgr_graph *g, int index, cgr_node **out);

/* A constant node: v is copied now and given to every execution. */
int cgr_graph_const(cgr_graph *g, const cgr_value *v, cgr_node **out);

/*
 * A task bound to worker w, with nin inputs (nodes of this graph; an entry
 * may be NULL and set later with cgr_node_set_input) and nout outputs: out
 * receives one node per output.  Returns 0, -EINVAL, -ENOMEM.
 */
int cgr_graph_task(cgr_graph *g, cgr_worker *w, const cgr_task_desc *t,
		   cgr_node *const *in, size_t nin, cgr_node **out,
		   size_t nout);

/* Sets input i of the task that produces node n to src. */
int cgr_node_set_input(cgr_node *n, size_t i, cgr_node *src);

/* Declares the graph's outputs (once).  Returns 0, -EINVAL, -EALREADY. */
int cgr_graph_output(cgr_graph *g, cgr_node *const *outs, size_t n);

/* The node's name as used in messages: "task#port", "input[i]", "const". */
const char *cgr_node_name(const cgr_node *n);

/*
 * The last error message of a graph call (compile validation names the
 * nodes involved here).  Valid until the next call on g.
 */
const char *cgr_graph_errmsg(const cgr_graph *g);

typedef struct cgr_compile_params {
	size_t size;
	uint32_t max_inflight;	   /* executions not yet released; default 8 */
	size_t max_value_bytes;	   /* per channel buffer; default 64 KiB */
	int64_t submit_timeout_ns; /* execute's longest wait; default 10 s */
	int64_t get_timeout_ns;	   /* ref_get's default; default 10 s */
	int wait_mode;		   /* enum cgr_wait_mode */
	int64_t spin_ns;	   /* adaptive spin before parking; default 50 us */
} cgr_compile_params;
#define CGR_COMPILE_PARAMS_INIT \
	{ sizeof(cgr_compile_params), 0, 0, -1, -1, CGR_WAIT_ADAPTIVE, -1 }

/*
 * Validates and compiles the graph: channels allocated, one program per
 * worker, programs started.  Validation failures return a CGR_E* code and
 * cgr_graph_errmsg names the nodes.  A graph compiles once (CGR_ECOMPILED).
 * A worker serves one live compiled graph at a time (-EBUSY).
 */
int cgr_graph_compile(cgr_graph *g, const cgr_compile_params *p,
		      cgr_compiled **out);

/* ------------------------------------------------------------------ */
/* Execution                                                          */
/* ------------------------------------------------------------------ */

typedef uint64_t cgr_ref;

/*
 * Starts one execution with args[0..nargs) (copied into cgr's buffers
 * before return).  Returns CGR_ENARGS for a wrong count, CGR_ETOOBIG for an
 * argument larger than its buffer, CGR_ECAPACITY when max_inflight
 * executions are not yet released (never blocks for that), CGR_ECLOSED
 * after teardown.  Never allocates.
 */
int cgr_execute(cgr_compiled *c, const cgr_value *args, size_t nargs,
		cgr_ref *out);

/*
 * Waits up to timeout_ns for execution ref and fills outs[0..nouts) (nouts
 * must equal the number of graph outputs).  Refs may be got in any order:
 * results of other executions that arrive meanwhile are kept (at most
 * max_inflight executions exist at once, so that is the bound).  An output
 * may be an error value: the call still returns 0.  The values stay valid
 * until cgr_ref_release.  Returns -ETIMEDOUT (try again later),
 * CGR_EUNKNOWNREF, CGR_ENARGS, CGR_ECLOSED.
 */
int cgr_ref_get(cgr_compiled *c, cgr_ref ref, int64_t timeout_ns,
		cgr_value *outs, size_t nouts);

/*
 * Releases execution ref: its buffers may be reused and it no longer
 * counts against max_inflight.  A ref not yet got is waited for first (up
 * to the get timeout).  Returns 0, CGR_EUNKNOWNREF, -ETIMEDOUT.
 */
int cgr_ref_release(cgr_compiled *c, cgr_ref ref);

/*
 * Tears the compiled graph down: executions in flight are cancelled,
 * workers leave its program and are free for another graph.  Waits at most
 * timeout_ns (negative: 1 s).  A worker stuck in a task past the deadline is
 * reported through the log and abandoned: CGR_ESTUCK is returned, the
 * worker can no longer be used, and what the stuck task may touch stays
 * allocated until it returns.  A second call is a no-op returning 0.
 */
int cgr_compiled_teardown(cgr_compiled *c, int64_t timeout_ns);

/* Teardown (1 s) if not done, then frees c.  NULL is a no-op. */
void cgr_compiled_destroy(cgr_compiled *c);

/* Number of graph outputs and arguments of one execution. */
size_t cgr_compiled_noutputs(const cgr_compiled *c);
size_t cgr_compiled_nargs(const cgr_compiled *c);

/* ------------------------------------------------------------------ */
/* Inside a task (worker thread only)                                 */
/* ------------------------------------------------------------------ */

/*
 * A buffer of at least `bytes` (64-byte aligned) where the task may build
 * output i directly: an output value whose data points into it is not
 * copied.  NULL if bytes exceeds the output's buffer.
 */
void *cgr_task_output_buffer(cgr_task_ctx *tc, size_t i, size_t bytes);

/* Sets the code and message of the error value a failing task produces. */
void cgr_task_set_error(cgr_task_ctx *tc, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* The task's desc.arg, the execution's sequence number, the worker. */
void *cgr_task_arg(const cgr_task_ctx *tc);
uint64_t cgr_task_seq(const cgr_task_ctx *tc);
cgr_worker *cgr_task_worker(const cgr_task_ctx *tc);

#ifdef __cplusplus
}
#endif

#endif /* CGR_H */
