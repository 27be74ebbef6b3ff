/*
 * tests/t_eager.h: a test built with T_EAGER runs every graph it
 * "compiles" eagerly instead (cgr_graph_execute_eager), through the same
 * calls: cgr_graph_compile keeps the graph (its destroy waits for the
 * compiled handle's), cgr_execute runs one execution at once and keeps a
 * copy of its outputs under the ref, cgr_ref_get hands the copy out,
 * cgr_compiled_destroy frees the graph.  Include it after cgr.h; the
 * test's own code does not change.
 */
#ifndef CGR_TEST_EAGER_H
#define CGR_TEST_EAGER_H
#ifdef T_EAGER

#include <stdlib.h>
#include <string.h>

#include <cgr.h>

#define T_EAGER_SLOTS 64
#define T_EAGER_OUTS 16

struct t_eager_out {
	cgr_value v;
	void *mem;
	int64_t shape[CGR_MAX_NDIM];
};

struct t_eager {
	cgr_graph *g;
	size_t nargs, nout;
	uint64_t next;
	struct t_eager_out out[T_EAGER_SLOTS][T_EAGER_OUTS];
};

static struct t_eager *t_eager_of[256]; /* graphs kept by a handle */

/* A copy of v that outlives the eager run. */
static void t_eager_copy(struct t_eager_out *o, const cgr_value *v)
{
	size_t n = 0;

	o->v = *v;
	o->mem = NULL;
	if (v->kind == CGR_VALUE_BYTES)
		n = v->u.bytes.len;
	else if (v->kind == CGR_VALUE_TENSOR)
		n = cgr_tensor_nbytes(&v->u.tensor);
	else if (v->kind == CGR_VALUE_ERROR)
		n = strlen(v->u.error.msg) + 1;
	o->mem = malloc(n + 1);
	if (v->kind == CGR_VALUE_BYTES) {
		memcpy(o->mem, v->u.bytes.data, n);
		o->v.u.bytes.data = o->mem;
	} else if (v->kind == CGR_VALUE_TENSOR) {
		memcpy(o->mem, v->u.tensor.data, n);
		memcpy(o->shape, v->u.tensor.shape,
		       (size_t)v->u.tensor.ndim * sizeof(int64_t));
		o->v.u.tensor.data = o->mem;
		o->v.u.tensor.shape = o->shape;
	} else if (v->kind == CGR_VALUE_ERROR) {
		memcpy(o->mem, v->u.error.msg, n);
		o->v.u.error.msg = o->mem;
	}
}

static int t_eager_compile(cgr_graph *g, const cgr_compile_params *p,
			   cgr_compiled **out)
{
	struct t_eager *e;
	/* Prepared now (what the first run would do): no arguments is
	 * CGR_ENARGS once prepared, or what preparing failed with. */
	int ret = cgr_graph_execute_eager(g, NULL, 0, NULL, 0, NULL);
	(void)p;
	if (ret != 0 && ret != CGR_ENARGS)
		return ret;
	e = calloc(1, sizeof(*e));
	e->g = g;
	for (int i = 0; i < 256; i++)
		if (t_eager_of[i] == NULL) {
			t_eager_of[i] = e;
			break;
		}
	*out = (cgr_compiled *)e;
	return 0;
}

static void t_eager_graph_destroy(cgr_graph *g)
{
	for (int i = 0; i < 256; i++)
		if (t_eager_of[i] != NULL && t_eager_of[i]->g == g)
			return; /* with its handle */
	cgr_graph_destroy(g);
}

static int t_eager_execute(cgr_compiled *c, const cgr_value *args,
			   size_t nargs, cgr_ref *ref)
{
	struct t_eager *e = (struct t_eager *)c;
	cgr_value outs[T_EAGER_OUTS];
	size_t nout = 0;
	int ret;

	/* The graph's output count: the first run learns it. */
	for (nout = 1; nout <= T_EAGER_OUTS; nout++) {
		ret = cgr_graph_execute_eager(e->g, args, nargs, outs, nout,
					      NULL);
		if (ret != CGR_ENARGS || nout == T_EAGER_OUTS)
			break;
	}
	if (ret != 0)
		return ret;
	e->nout = nout;
	*ref = e->next++;
	for (size_t o = 0; o < nout && o < T_EAGER_OUTS; o++)
		t_eager_copy(&e->out[*ref % T_EAGER_SLOTS][o], &outs[o]);
	return 0;
}

static int t_eager_get(cgr_compiled *c, cgr_ref ref, int64_t timeout,
		       cgr_value *outs, size_t n)
{
	struct t_eager *e = (struct t_eager *)c;
	(void)timeout;
	if (n != e->nout || n > T_EAGER_OUTS)
		return CGR_ENARGS;
	for (size_t o = 0; o < n; o++)
		outs[o] = e->out[ref % T_EAGER_SLOTS][o].v;
	return 0;
}

static int t_eager_release(cgr_compiled *c, cgr_ref ref)
{
	struct t_eager *e = (struct t_eager *)c;
	for (size_t o = 0; o < e->nout && o < T_EAGER_OUTS; o++) {
		free(e->out[ref % T_EAGER_SLOTS][o].mem);
		e->out[ref % T_EAGER_SLOTS][o].mem = NULL;
	}
	return 0;
}

static void t_eager_destroy(cgr_compiled *c)
{
	struct t_eager *e = (struct t_eager *)c;
	if (e == NULL)
		return;
	for (int i = 0; i < 256; i++)
		if (t_eager_of[i] == e)
			t_eager_of[i] = NULL;
	cgr_graph_destroy(e->g);
	free(e);
}

static int t_eager_teardown(cgr_compiled *c, int64_t t)
{
	(void)c, (void)t;
	return 0;
}

#define cgr_graph_compile t_eager_compile
#define cgr_graph_destroy t_eager_graph_destroy
#define cgr_execute t_eager_execute
#define cgr_ref_get t_eager_get
#define cgr_ref_release t_eager_release
#define cgr_compiled_destroy t_eager_destroy
#define cgr_compiled_teardown t_eager_teardown
#endif
#endif
