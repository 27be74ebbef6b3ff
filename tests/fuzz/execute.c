/*
 * tests/fuzz/execute.c: cgr_execute's arguments.  A compiled graph (one
 * thread worker, a task that echoes its input, 4096-byte argument
 * buffers) takes a decoded value (tests/fuzz/fuzz.h) as its argument:
 * cgr_execute returns 0, CGR_ETOOBIG or CGR_EBADVALUE, never accepts a
 * value whose data is not real memory (a range that wraps, a size past
 * the buffer) but a CUDA tensor (by reference: cgr never reads it), nor a
 * list holding one, and what it accepts comes back equal (a CUDA tensor,
 * which the echo outputs on the host, as a CGR_EBADVALUE error value, or
 * CGR_ETOOBIG past the output's buffer; an error value as an error
 * value).  After every input a plain execution
 * still gives the right value.
 */
#include <stdlib.h>

#include "fuzz.h"

static cgr_compiled *c;

static int echo(cgr_task_ctx *tc, void *st, const cgr_value *in, size_t nin,
		cgr_value *out, size_t nout)
{
	(void)tc, (void)st, (void)nin, (void)nout;
	out[0] = in[0];
	return 0;
}

/* A plain execution gives its argument back. */
static void probe(uint64_t x)
{
	cgr_value arg = cgr_value_bytes(&x, 8), res;
	cgr_ref ref;

	fz_assert(cgr_execute(c, &arg, 1, &ref) == 0);
	fz_assert(cgr_ref_get(c, ref, 10ll * 1000000000, &res, 1) == 0);
	fz_assert(fz_same(&arg, &res, NULL, 0));
	fz_assert(cgr_ref_release(c, ref) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct fz_value fv;
	static uint64_t n;
	struct fz f = { data, size };
	struct fz_arena a = { .n = 0 };
	cgr_value res;
	cgr_ref ref;
	int ret;

	fz_value(&f, &a, &fv);
	ret = cgr_execute(c, &fv.v, 1, &ref);
	fz_assert(ret == 0 || ret == CGR_ETOOBIG || ret == CGR_EBADVALUE);
	if (fv.v.kind == CGR_VALUE_LIST && fz_on_device(&fv.v))
		fz_assert(ret != 0);
	if (ret == 0) {
		fz_assert(fv.backed || fz_on_device(&fv.v));
		fz_assert(cgr_ref_get(c, ref, 10ll * 1000000000, &res, 1) == 0);
		if (fz_on_device(&fv.v))
			fz_assert(res.kind == CGR_VALUE_ERROR &&
				  (res.code == CGR_EBADVALUE ||
				   res.code == CGR_ETOOBIG));
		else if (fv.v.kind == CGR_VALUE_ERROR)
			fz_assert(res.kind == CGR_VALUE_ERROR);
		else
			fz_assert(fz_same(&fv.v, &res, NULL, 0));
		fz_assert(cgr_ref_release(c, ref) == 0);
	}
	fz_arena_free(&a);
	probe(n++);
	return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *dir = getenv("CGR_FUZZ_SEEDS");
	cgr_compile_params p = CGR_COMPILE_PARAMS_INIT;

	(void)argc, (void)argv;
	if (dir != NULL && *dir) {
		fz_value_seeds(dir, "arg-", NULL, 0);
		exit(0);
	}
	p.max_value_bytes = 4096;
	p.max_inflight = 2;
	c = fz_one_task("echo", echo, 8192, &p);
	return 0; /* the graph lives as long as the process */
}
