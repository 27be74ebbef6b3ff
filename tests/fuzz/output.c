/*
 * tests/fuzz/output.c: what a task hands back.  A compiled graph (one
 * thread worker, 4096-byte output buffers) whose task returns a decoded
 * value (tests/fuzz/fuzz.h): the output the driver gets is that value if
 * cgr's checker accepts it, else an error value of the checker's code
 * (CGR_ETOOBIG, CGR_EBADVALUE), and never a value whose data was not real
 * memory.  After every input a plain execution still gives the right
 * value: a bad output affects nothing else.
 */
#include <stdlib.h>

#include "chan/chan.h"
#include "fuzz.h"

static cgr_compiled *c;
static struct fz_value fv; /* what the task returns (written before
			      cgr_execute, read by the worker after) */
static _Atomic int plain = 1;

static int emit(cgr_task_ctx *tc, void *st, const cgr_value *in, size_t nin,
		cgr_value *out, size_t nout)
{
	(void)tc, (void)st, (void)nin, (void)nout;
	out[0] = plain ? in[0] : fv.v;
	return 0;
}

/* One execution: the task's output, checked by want. */
static cgr_value run(uint64_t x, cgr_ref *ref)
{
	cgr_value arg = cgr_value_bytes(&x, 8), res;

	fz_assert(cgr_execute(c, &arg, 1, ref) == 0);
	fz_assert(cgr_ref_get(c, *ref, 10ll * 1000000000, &res, 1) == 0);
	return res;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint64_t n;
	struct fz f = { data, size };
	struct fz_arena a = { .n = 0 };
	cgr_value res, x;
	cgr_ref ref;
	int want;

	fz_value(&f, &a, &fv);
	want = cgr__value_check(&fv.v, 4096, NULL);
	/* A CUDA tensor is never a host output, whatever its size. */
	if ((want == 0 || want == CGR_ETOOBIG) && fz_on_device(&fv.v))
		want = CGR_EBADVALUE;
	plain = 0;
	res = run(n, &ref);
	plain = 1;
	if (fv.v.kind == CGR_VALUE_ERROR) {
		fz_assert(res.kind == CGR_VALUE_ERROR);
	} else if (want != 0) {
		fz_assert(res.kind == CGR_VALUE_ERROR && res.code == want);
	} else {
		fz_assert(fv.backed);
		fz_assert(fz_same(&fv.v, &res, NULL, 0));
	}
	fz_assert(cgr_ref_release(c, ref) == 0);
	fz_arena_free(&a);
	/* The next execution is unaffected. */
	res = run(++n, &ref);
	x = cgr_value_bytes(&n, 8);
	fz_assert(fz_same(&x, &res, NULL, 0));
	fz_assert(cgr_ref_release(c, ref) == 0);
	return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *dir = getenv("CGR_FUZZ_SEEDS");

	(void)argc, (void)argv;
	if (dir != NULL && *dir) {
		fz_value_seeds(dir, "out-", NULL, 0);
		exit(0);
	}
	c = fz_one_task("emit", emit, 4096, NULL);
	return 0; /* the graph lives as long as the process */
}
