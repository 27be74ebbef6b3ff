/*
 * tests/value-bounds.c: sizes from the caller's values are computed with
 * overflow checks, through the public API only.  Each malformed or
 * oversized value (a tensor whose byte_offset wraps the address space,
 * alone and in a list; a list whose padded total wraps; bytes whose range
 * wraps; a shape whose size overflows; a zero-element tensor with huge
 * strides, which is fine; a tensor whose dtype has a code DLPack does not
 * define, no lanes, or elements of less than a byte) is tried as an
 * argument of cgr_execute, as a graph constant and as a task output, and
 * must get its exact code: CGR_EBADVALUE or CGR_ETOOBIG from cgr_execute,
 * an error value with that code as a task output, -EINVAL or CGR_ETOOBIG
 * from cgr_graph_const.
 * max_out_bytes and max_value_bytes past 1 TiB are refused.  After every
 * refusal the graph still computes the right values.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include <cgr.h>

#include "tap.h"

enum kind {
	K_GOOD = 0,	    /* out = payload + constant (u64) */
	K_ECHO,		    /* out = the payload, as it came */
	K_OFFSET_WRAP,	    /* data + byte_offset wraps */
	K_OFFSET_END_WRAP,  /* data + byte_offset + size wraps */
	K_LIST_OFFSET_WRAP, /* a list holding K_OFFSET_WRAP */
	K_LIST_TOTAL_WRAP,  /* two items of 2^63 bytes */
	K_LIST_PAD_WRAP,    /* one item whose 64-byte padding wraps */
	K_BYTES_WRAP,	    /* bytes: data + len wraps */
	K_BYTES_HUGE,	    /* bytes: 2^41, larger than any buffer */
	K_SHAPE_OVERFLOW,   /* 2^40 x 2^40 floats */
	K_ZERO_STRIDES,	    /* zero elements, strides whose product
			       overflows: accepted */
	K_DTYPE_CODE,	    /* a type code DLPack does not define (99) */
	K_DTYPE_LANES,	    /* lanes 0 */
	K_DTYPE_BITS,	    /* 4 bits x 1 lane: not whole bytes */
	K_COUNT
};

static const char *const kname[K_COUNT] = {
	"good", "echo", "byte_offset wraps", "byte_offset + size wraps",
	"list with a wrapping tensor", "list whose total wraps",
	"list whose padding wraps", "bytes whose range wraps",
	"bytes of 2^41", "shape whose size overflows",
	"zero elements, huge strides", "dtype code 99", "dtype lanes 0",
	"dtype of 4 bits",
};

/* What cgr_execute returns for each bad kind (task outputs get an error
 * value of this code; constants -EINVAL for CGR_EBADVALUE). */
static const int kerr[K_COUNT] = {
	[K_OFFSET_WRAP] = CGR_EBADVALUE,
	[K_OFFSET_END_WRAP] = CGR_EBADVALUE,
	[K_LIST_OFFSET_WRAP] = CGR_EBADVALUE,
	[K_LIST_TOTAL_WRAP] = CGR_ETOOBIG,
	[K_LIST_PAD_WRAP] = CGR_ETOOBIG,
	[K_BYTES_WRAP] = CGR_EBADVALUE,
	[K_BYTES_HUGE] = CGR_ETOOBIG,
	[K_SHAPE_OVERFLOW] = CGR_ETOOBIG,
	[K_ZERO_STRIDES] = 0,
	[K_DTYPE_CODE] = CGR_EBADVALUE,
	[K_DTYPE_LANES] = CGR_EBADVALUE,
	[K_DTYPE_BITS] = CGR_EBADVALUE,
};

/* Read-only storage the bad values point at (never written through). */
static uint64_t buf[16];
static int64_t shape4[1] = { 4 }, shape16[1] = { 16 };
static int64_t shape_2p60[1] = { (int64_t)1 << 60 };
static int64_t shape_ovf[2] = { (int64_t)1 << 40, (int64_t)1 << 40 };
static int64_t shape_zero[3] = { 0, (int64_t)1 << 40, (int64_t)1 << 40 };
static int64_t strides_zero[3] = { INT64_MAX, (int64_t)1 << 40, 1 };

/* Bad value k (items: room for two list items). */
static cgr_value bad_value(int k, cgr_value *items)
{
	cgr_value v;
	uintptr_t b = (uintptr_t)buf;

	switch (k) {
	case K_OFFSET_WRAP:
		v = cgr_value_tensor(buf, kDLFloat, 32, 1, shape4);
		v.u.tensor.byte_offset = UINT64_MAX - b + 1 + 64; /* at 64 */
		return v;
	case K_OFFSET_END_WRAP:
		v = cgr_value_tensor(buf, kDLUInt, 8, 1, shape16);
		v.u.tensor.byte_offset = UINT64_MAX - b - 8;
		return v;
	case K_LIST_OFFSET_WRAP:
		items[0] = cgr_value_bytes(buf, 8);
		items[1] = bad_value(K_OFFSET_WRAP, NULL);
		return cgr_value_list(items, 2);
	case K_LIST_TOTAL_WRAP:
		/* 2^63 bytes each, at an address where that range fits. */
		items[0] = cgr_value_tensor((void *)(uintptr_t)4096, kDLFloat,
					    64, 1, shape_2p60);
		items[1] = items[0];
		return cgr_value_list(items, 2);
	case K_LIST_PAD_WRAP:
		/* 1 + len does not wrap; len rounded up to 64 does. */
		items[0] = cgr_value_bytes((void *)(uintptr_t)1,
					   SIZE_MAX - 70);
		return cgr_value_list(items, 1);
	case K_BYTES_WRAP:
		return cgr_value_bytes(buf, SIZE_MAX - 64);
	case K_BYTES_HUGE:
		return cgr_value_bytes((void *)(uintptr_t)64, (size_t)1 << 41);
	case K_SHAPE_OVERFLOW:
		return cgr_value_tensor(buf, kDLFloat, 32, 2, shape_ovf);
	case K_ZERO_STRIDES:
		v = cgr_value_tensor(buf, kDLUInt, 8, 3, shape_zero);
		v.u.tensor.strides = strides_zero;
		return v;
	case K_DTYPE_CODE:
		return cgr_value_tensor(buf, 99, 32, 1, shape4);
	case K_DTYPE_LANES:
		v = cgr_value_tensor(buf, kDLFloat, 32, 1, shape4);
		v.u.tensor.dtype.lanes = 0;
		return v;
	case K_DTYPE_BITS:
		return cgr_value_tensor(buf, kDLUInt, 4, 1, shape4);
	default:
		return cgr_value_bytes(buf, 8);
	}
}

/* in[0]: the kind (u64); in[1]: the payload; in[2]: a constant (u64). */
static int emit(cgr_task_ctx *tc, void *st, const cgr_value *in, size_t nin,
		cgr_value *out, size_t nout)
{
	static __thread cgr_value items[2];
	static __thread uint64_t sum;
	uint64_t k, x, y;

	(void)tc, (void)st, (void)nin, (void)nout;
	memcpy(&k, in[0].u.bytes.data, 8);
	if (k == K_GOOD) {
		memcpy(&x, in[1].u.bytes.data, 8);
		memcpy(&y, in[2].u.bytes.data, 8);
		sum = x + y;
		out[0] = cgr_value_bytes(&sum, 8);
	} else if (k == K_ECHO) {
		out[0] = in[1];
	} else {
		out[0] = bad_value((int)k, items);
	}
	return 0;
}

struct rig {
	cgr_ctx *ctx;
	cgr_worker *w[2];
	cgr_compiled *c;
	uint64_t konst;
};

/* One execution: 0 and *res, or the error of cgr_execute. */
static int run(struct rig *r, uint64_t k, const cgr_value *payload,
	       cgr_value *res, cgr_ref *ref)
{
	cgr_value args[2] = { cgr_value_bytes(&k, 8), *payload };
	int ret = cgr_execute(r->c, args, 2, ref);

	if (ret < 0)
		return ret;
	return cgr_ref_get(r->c, *ref, CGR_FOREVER, res, 1);
}

/* A valid execution gives payload + constant. */
static int still_good(struct rig *r, uint64_t x)
{
	cgr_value p = cgr_value_bytes(&x, 8), res;
	cgr_ref ref;
	uint64_t got = 0;
	int ok;

	if (run(r, K_GOOD, &p, &res, &ref) != 0)
		return 0;
	if (res.kind == CGR_VALUE_BYTES && res.u.bytes.len == 8)
		memcpy(&got, res.u.bytes.data, 8);
	ok = res.kind == CGR_VALUE_BYTES && got == x + r->konst;
	cgr_ref_release(r->c, ref);
	return ok;
}

static void check_nbytes(void)
{
	DLTensor t;

	memset(&t, 0, sizeof(t));
	t.ndim = 2;
	t.shape = shape_ovf;
	t.dtype.bits = 32;
	t.dtype.lanes = 1;
	t.dtype.code = kDLFloat;
	t_is(cgr_tensor_nbytes(&t), 0, "cgr_tensor_nbytes: 2^80 floats is 0");
	t.ndim = 1;
	t.shape = shape_2p60;
	t.dtype.bits = 64;
	t_ok(cgr_tensor_nbytes(&t) == (size_t)1 << 63,
	     "cgr_tensor_nbytes: 2^60 doubles is 2^63 bytes");
	t.dtype.lanes = 16; /* 2^67 bytes */
	t_is(cgr_tensor_nbytes(&t), 0,
	     "cgr_tensor_nbytes: 2^60 elements of 128 bytes is 0");
	t.ndim = 3;
	t.shape = shape_zero;
	t.dtype.lanes = 1;
	t_is(cgr_tensor_nbytes(&t), 0, "cgr_tensor_nbytes: zero elements");
}

/* Every bad kind as an argument of cgr_execute. */
static void check_execute(struct rig *r)
{
	cgr_value items[2], res;
	cgr_ref ref;
	int ret;

	for (int k = K_OFFSET_WRAP; k < K_COUNT; k++) {
		cgr_value v = bad_value(k, items);
		ret = run(r, K_ECHO, &v, &res, &ref);
		t_is(ret, kerr[k], "cgr_execute, %s: %s", kname[k],
		     cgr_err_name(ret));
		if (ret == 0) {
			t_ok(res.kind == CGR_VALUE_TENSOR &&
				     res.u.tensor.ndim == 3 &&
				     res.u.tensor.shape[0] == 0 &&
				     res.u.tensor.shape[2] == (int64_t)1 << 40,
			     "... and it arrives with its shape");
			cgr_ref_release(r->c, ref);
		}
		t_ok(still_good(r, 1000 + (uint64_t)k),
		     "... the next execution gives the right value");
	}
	/* More refusals than executions may be in flight: none counts. */
	for (int i = 0; i < 20; i++) {
		cgr_value v = bad_value(K_LIST_TOTAL_WRAP, items);
		ret = run(r, K_ECHO, &v, &res, &ref);
		if (ret != CGR_ETOOBIG)
			break;
	}
	t_is(ret, CGR_ETOOBIG, "20 refused executions in a row");
	t_ok(still_good(r, 7), "... hold no capacity");
}

/* Every bad kind as a task's output: an error value of its code. */
static void check_outputs(struct rig *r)
{
	cgr_value res, p = cgr_value_bytes(buf, 8);
	cgr_ref ref;
	int ret;

	for (int k = K_OFFSET_WRAP; k < K_COUNT; k++) {
		ret = run(r, (uint64_t)k, &p, &res, &ref);
		if (kerr[k] == 0)
			t_ok(ret == 0 && res.kind == CGR_VALUE_TENSOR &&
				     res.u.tensor.shape[0] == 0,
			     "task output, %s: accepted", kname[k]);
		else
			t_ok(ret == 0 && res.kind == CGR_VALUE_ERROR &&
				     res.code == kerr[k],
			     "task output, %s: an error value %s (%s)",
			     kname[k], cgr_err_name(kerr[k]),
			     ret == 0 && res.kind == CGR_VALUE_ERROR ?
				     res.u.error.msg :
				     "none");
		if (ret == 0)
			cgr_ref_release(r->c, ref);
		t_ok(still_good(r, 2000 + (uint64_t)k),
		     "... the next execution gives the right value");
	}
}

/* Every bad kind as a constant, then the graph with a good one. */
static void check_consts(struct rig *r, cgr_graph *g)
{
	cgr_value items[2], v;
	cgr_node *n;
	int ret, want;

	for (int k = K_OFFSET_WRAP; k < K_COUNT; k++) {
		v = bad_value(k, items);
		n = NULL;
		ret = cgr_graph_const(g, &v, &n);
		want = kerr[k] == CGR_EBADVALUE ? -EINVAL : kerr[k];
		t_is(ret, want, "cgr_graph_const, %s: %s", kname[k],
		     cgr_err_name(ret));
	}
	v = cgr_value_bytes((void *)(uintptr_t)64, ((size_t)1 << 40) + 1);
	t_is(cgr_graph_const(g, &v, &n), CGR_ETOOBIG,
	     "cgr_graph_const, 2^40 + 1 bytes: %s", cgr_graph_errmsg(g));
	(void)r;
}

static const size_t bad_max[] = { SIZE_MAX, (size_t)1 << 61,
				   ((size_t)1 << 40) + 1 };

/* max_out_bytes past 1 TiB, of a task and of a collective. */
static void check_limits(struct rig *r)
{
	const size_t *bad = bad_max;
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	cgr_coll_params cp = CGR_COLL_PARAMS_INIT;
	cgr_graph *g;
	cgr_node *in, *t[2], *o[2];

	cgr_graph_create(r->ctx, &g);
	cgr_graph_input(g, 0, &in);
	d.name = "emit";
	d.fn = emit;
	for (size_t i = 0; i < 3; i++) {
		d.max_out_bytes = bad[i];
		t_is(cgr_graph_task(g, r->w[0], &d, &in, 1, &t[0], 1), -EINVAL,
		     "cgr_graph_task, max_out_bytes %zu", bad[i]);
		t_ok(strstr(cgr_graph_errmsg(g), "max_out_bytes") != NULL,
		     "... and its message says why: %s", cgr_graph_errmsg(g));
		cp.kind = CGR_COLL_ALLREDUCE;
		cp.max_out_bytes = bad[i];
		t[0] = t[1] = NULL;
		d.max_out_bytes = 0;
		cgr_graph_task(g, r->w[0], &d, &in, 1, &t[0], 1);
		cgr_graph_task(g, r->w[1], &d, &in, 1, &t[1], 1);
		t_is(cgr_graph_collective(g, &cp, r->w, 2, t, 2, o, 2), -EINVAL,
		     "cgr_graph_collective, max_out_bytes %zu: %s", bad[i],
		     cgr_graph_errmsg(g));
	}
	d.max_out_bytes = (size_t)1 << 40;
	t_is(cgr_graph_task(g, r->w[0], &d, &in, 1, &t[0], 1), 0,
	     "cgr_graph_task, max_out_bytes 2^40 (not compiled)");
	cgr_graph_destroy(g);
}

/* What a task sees of a CUDA tensor argument: its pointer, device and
 * shape. */
static int see_ref(cgr_task_ctx *tc, void *st, const cgr_value *in,
		   size_t nin, cgr_value *out, size_t nout)
{
	static __thread uint64_t o[4];
	(void)tc, (void)st, (void)nin, (void)nout;

	o[0] = (uint64_t)(uintptr_t)in[0].u.tensor.data;
	o[1] = (uint64_t)in[0].u.tensor.device.device_type;
	o[2] = (uint64_t)in[0].u.tensor.device.device_id;
	o[3] = in[0].kind == CGR_VALUE_TENSOR ?
		       (uint64_t)in[0].u.tensor.shape[0] :
		       0;
	out[0] = cgr_value_bytes(o, sizeof(o));
	return 0;
}

/* 4000 bytes built at offset 64 of its own output buffer (a header's
 * room in front): moved to the buffer's start, overlapping. */
static int at_offset(cgr_task_ctx *tc, void *st, const cgr_value *in,
		     size_t nin, cgr_value *out, size_t nout)
{
	unsigned char *b = cgr_task_output_buffer(tc, 0, 4064);
	(void)st, (void)in, (void)nin, (void)nout;

	if (b == NULL)
		return -ENOSPC;
	for (int i = 0; i < 4000; i++)
		b[64 + i] = (unsigned char)(i * 7 + 1);
	out[0] = cgr_value_bytes(b + 64, 4000);
	return 0;
}

/* Its input as its output. */
static int pass_on(cgr_task_ctx *tc, void *st, const cgr_value *in,
		   size_t nin, cgr_value *out, size_t nout)
{
	(void)tc, (void)st, (void)nin, (void)nout;
	out[0] = in[0];
	return 0;
}

/* A CUDA tensor argument goes by reference (larger than any buffer: it
 * is not copied), compiled and eager; inside a list it is refused before
 * anything starts.  (The task does not touch the memory: no GPU here.) */
static void check_cuda_arg(cgr_ctx *ctx, cgr_worker *w)
{
	static int64_t big[1] = { (int64_t)1 << 30 };
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	cgr_graph *g;
	cgr_node *x, *y;
	cgr_compiled *c = NULL;
	cgr_value v, res, items[2];
	cgr_ref ref;
	uint64_t o[4] = { 0 };
	int ret;

	v = cgr_value_tensor((void *)(uintptr_t)0x7f0000001000ull, kDLFloat,
			     32, 1, big);
	v.u.tensor.device.device_type = kDLCUDA;
	v.u.tensor.device.device_id = 3;
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	d.name = "see_ref", d.fn = see_ref;
	cgr_graph_task(g, w, &d, &x, 1, &y, 1);
	cgr_graph_output(g, &y, 1);
	ret = cgr_graph_execute_eager(g, &v, 1, &res, 1, NULL);
	if (ret == 0 && res.kind == CGR_VALUE_BYTES)
		memcpy(o, res.u.bytes.data, sizeof(o));
	t_ok(ret == 0 && o[0] == 0x7f0000001000ull && o[1] == kDLCUDA &&
		     o[2] == 3 && o[3] == (uint64_t)1 << 30,
	     "eager: a 4 GiB CUDA tensor argument arrives by reference (%s)",
	     cgr_err_name(ret));
	items[0] = cgr_value_bytes(o, 8);
	items[1] = v;
	res = cgr_value_list(items, 2);
	t_is(cgr_graph_execute_eager(g, &res, 1, &res, 1, NULL), CGR_EBADVALUE,
	     "eager: one inside a list is CGR_EBADVALUE");
	cgr_graph_destroy(g);
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	cgr_graph_task(g, w, &d, &x, 1, &y, 1);
	cgr_graph_output(g, &y, 1);
	t_is(cgr_graph_compile(g, NULL, &c), 0, "compiled");
	cgr_graph_destroy(g);
	memset(o, 0, sizeof(o));
	ret = c != NULL ? cgr_execute(c, &v, 1, &ref) : -1;
	if (ret == 0)
		ret = cgr_ref_get(c, ref, -1, &res, 1);
	if (ret == 0 && res.kind == CGR_VALUE_BYTES)
		memcpy(o, res.u.bytes.data, sizeof(o));
	t_ok(ret == 0 && o[0] == 0x7f0000001000ull && o[1] == kDLCUDA &&
		     o[2] == 3 && o[3] == (uint64_t)1 << 30,
	     "compiled: a 4 GiB CUDA tensor argument arrives by reference (%s)",
	     cgr_err_name(ret));
	if (ret == 0)
		cgr_ref_release(c, ref);
	res = cgr_value_list(items, 2);
	t_is(c != NULL ? cgr_execute(c, &res, 1, &ref) : -1, CGR_EBADVALUE,
	     "compiled: one inside a list is CGR_EBADVALUE");
	cgr_compiled_destroy(c);
	/* An output built at an offset of its own buffer arrives whole
	 * (moved, not copied over itself). */
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	d.name = "at_offset", d.fn = at_offset;
	cgr_graph_task(g, w, &d, &x, 1, &y, 1);
	cgr_graph_output(g, &y, 1);
	c = NULL;
	cgr_graph_compile(g, NULL, &c);
	cgr_graph_destroy(g);
	{
		int64_t one = 1;
		cgr_value a1 = cgr_value_bytes(&one, 8);
		bool same = false;
		ret = c != NULL ? cgr_execute(c, &a1, 1, &ref) : -1;
		if (ret == 0)
			ret = cgr_ref_get(c, ref, -1, &res, 1);
		if (ret == 0 && res.kind == CGR_VALUE_BYTES &&
		    res.u.bytes.len == 4000) {
			const unsigned char *p = res.u.bytes.data;
			same = true;
			for (int i = 0; i < 4000; i++)
				same &= p[i] == (unsigned char)(i * 7 + 1);
		}
		t_ok(same, "an output built at offset 64 of its own buffer "
			   "arrives whole (%s)",
		     cgr_err_name(ret));
		if (ret == 0)
			cgr_ref_release(c, ref);
		cgr_compiled_destroy(c);
	}
	d.name = "see_ref", d.fn = see_ref;
	/* A plain task that passes it on as its output: never a host
	 * output, whatever its size (CGR_EBADVALUE, not CGR_ETOOBIG). */
	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	d.name = "pass", d.fn = pass_on;
	cgr_graph_task(g, w, &d, &x, 1, &y, 1);
	cgr_graph_output(g, &y, 1);
	c = NULL;
	cgr_graph_compile(g, NULL, &c);
	cgr_graph_destroy(g);
	ret = c != NULL ? cgr_execute(c, &v, 1, &ref) : -1;
	if (ret == 0)
		ret = cgr_ref_get(c, ref, -1, &res, 1);
	t_ok(ret == 0 && res.kind == CGR_VALUE_ERROR &&
		     res.code == CGR_EBADVALUE &&
		     strstr(res.u.error.msg, "CUDA tensor in a host output"),
	     "a 4 GiB CUDA tensor as a plain task's output: CGR_EBADVALUE "
	     "(%s)",
	     ret == 0 && res.kind == CGR_VALUE_ERROR ? res.u.error.msg : "?");
	if (ret == 0)
		cgr_ref_release(c, ref);
	cgr_compiled_destroy(c);
}

int main(int argc, char **argv)
{
	cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	struct rig r;
	cgr_graph *g;
	cgr_node *in[3], *out;
	cgr_value kv;
	int ret;

	t_init(argc, argv, 60);
	memset(&r, 0, sizeof(r));
	t_is(cgr_ctx_create(NULL, &r.ctx), 0, "context");
	wp.name = "w0";
	cgr_worker_create(r.ctx, &wp, &r.w[0]);
	wp.name = "w1";
	cgr_worker_create(r.ctx, &wp, &r.w[1]);
	check_nbytes();
	check_limits(&r);
	check_cuda_arg(r.ctx, r.w[0]);

	cgr_graph_create(r.ctx, &g);
	cgr_graph_input(g, 0, &in[0]);
	cgr_graph_input(g, 1, &in[1]);
	check_consts(&r, g);
	r.konst = 5;
	kv = cgr_value_bytes(&r.konst, 8);
	t_is(cgr_graph_const(g, &kv, &in[2]), 0, "a good constant after them");
	d.name = "emit";
	d.fn = emit;
	d.max_out_bytes = 4096;
	t_is(cgr_graph_task(g, r.w[0], &d, in, 3, &out, 1), 0,
	     "task, max_out_bytes 4096");
	cgr_graph_output(g, &out, 1);
	for (size_t i = 0; i < 3; i++) {
		cgr_compile_params p = CGR_COMPILE_PARAMS_INIT;
		p.max_value_bytes = bad_max[i];
		t_is(cgr_graph_compile(g, &p, &r.c), -EINVAL,
		     "cgr_graph_compile, max_value_bytes %zu", bad_max[i]);
	}
	ret = cgr_graph_compile(g, NULL, &r.c);
	t_is(ret, 0, "compiled: %s", cgr_graph_errmsg(g));
	cgr_graph_destroy(g);
	if (ret != 0)
		return t_done();
	t_ok(still_good(&r, 1), "a first execution gives the right value");
	check_execute(&r);
	check_outputs(&r);
	t_is(cgr_compiled_teardown(r.c, -1), 0, "teardown");
	cgr_compiled_destroy(r.c);
	cgr_ctx_destroy(r.ctx);
	return t_done();
}
