/*
 * examples/tp_mlp.h: a tensor-parallel 2-layer MLP, y = relu(x W1) W2,
 * split over TP workers as Megatron does: each worker's init builds a
 * column block of W1 and the matching row block of W2; its task computes a
 * partial y that an allreduce sums.  Integer-valued weights and inputs
 * keep every float32 sum exact, so results compare bit for bit with
 * mlp_reference whatever the order of the sums.  Shared by the demo and
 * perf/tp_mlp.
 */
#ifndef CGR_EXAMPLE_TP_MLP_H
#define CGR_EXAMPLE_TP_MLP_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cgr.h>


#define TP 4	  /* workers */
#define BATCH 8
#define DIN 64
#define DHID 256 /* split TP ways */
#define DOUT 64

static float W1[DIN][DHID], W2[DHID][DOUT]; /* the full weights */

struct shard {
	int rank;
	float w1[DIN][DHID / TP];  /* columns rank*DHID/TP ... */
	float w2[DHID / TP][DOUT]; /* the matching rows */
};

static int shard_init(void *arg, void **state)
{
	struct shard *s = malloc(sizeof(*s));
	int r = (int)(intptr_t)arg, c0 = r * (DHID / TP);

	if (s == NULL)
		return -12;
	s->rank = r;
	for (int i = 0; i < DIN; i++)
		for (int j = 0; j < DHID / TP; j++)
			s->w1[i][j] = W1[i][c0 + j];
	for (int i = 0; i < DHID / TP; i++)
		for (int j = 0; j < DOUT; j++)
			s->w2[i][j] = W2[c0 + i][j];
	*state = s;
	return 0;
}

static void shard_fini(void *arg, void *state)
{
	(void)arg;
	free(state);
}

/* partial y = relu(x w1) w2, written in place into cgr's buffer. */
static int mlp_part(cgr_task_ctx *tc, void *st, const cgr_value *in,
		    size_t nin, cgr_value *out, size_t nout)
{
	static __thread int64_t shape[2] = { BATCH, DOUT };
	const struct shard *s = st;
	const float *x = in[0].u.tensor.data;
	float h[BATCH][DHID / TP], *y = cgr_task_output_buffer(tc, 0,
								sizeof(float) * BATCH * DOUT);

	(void)nin, (void)nout;
	for (int b = 0; b < BATCH; b++)
		for (int j = 0; j < DHID / TP; j++) {
			float a = 0;
			for (int i = 0; i < DIN; i++)
				a += x[b * DIN + i] * s->w1[i][j];
			h[b][j] = a > 0 ? a : 0;
		}
	for (int b = 0; b < BATCH; b++)
		for (int j = 0; j < DOUT; j++) {
			float a = 0;
			for (int i = 0; i < DHID / TP; i++)
				a += h[b][i] * s->w2[i][j];
			y[b * DOUT + j] = a;
		}
	out[0] = cgr_value_tensor(y, kDLFloat, 32, 2,
					shape);
	return 0;
}

static __attribute__((unused)) void mlp_reference(const float *x,
						  float *y)
{
	static float h[BATCH][DHID];
	for (int b = 0; b < BATCH; b++)
		for (int j = 0; j < DHID; j++) {
			float a = 0;
			for (int i = 0; i < DIN; i++)
				a += x[b * DIN + i] * W1[i][j];
			h[b][j] = a > 0 ? a : 0;
		}
	for (int b = 0; b < BATCH; b++)
		for (int j = 0; j < DOUT; j++) {
			float a = 0;
			for (int i = 0; i < DHID; i++)
				a += h[b][i] * W2[i][j];
			y[b * DOUT + j] = a;
		}
}

static void mlp_weights(void)
{
	for (int i = 0; i < DIN; i++)
		for (int j = 0; j < DHID; j++)
			W1[i][j] = (float)((i * 7 + j * 3) % 5 - 2);
	for (int i = 0; i < DHID; i++)
		for (int j = 0; j < DOUT; j++)
			W2[i][j] = (float)((i * 5 + j * 11) % 3 - 1);
}

static void mlp_input(float *x, int it, DLTensor *t, int64_t *shape)
{
	for (int i = 0; i < BATCH * DIN; i++)
		x[i] = (float)((i * 13 + it) % 7 - 3);
	memset(t, 0, sizeof(*t));
	shape[0] = BATCH;
	shape[1] = DIN;
	t->data = x;
	t->device.device_type = kDLCPU;
	t->ndim = 2;
	t->shape = shape;
	t->dtype.code = kDLFloat;
	t->dtype.bits = 32;
	t->dtype.lanes = 1;
}

/* Workers tp0..tp<TP-1> holding the shards. */
static int mlp_workers(cgr_ctx *ctx, cgr_worker **w)
{
	int ret;
	for (int i = 0; i < TP; i++) {
		cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
		char name[16];
		snprintf(name, sizeof(name), "tp%d", i);
		wp.name = name;
		wp.init = shard_init;
		wp.fini = shard_fini;
		wp.arg = (void *)(intptr_t)i;
		if ((ret = cgr_worker_create(ctx, &wp, &w[i])) != 0)
			return ret;
	}
	return 0;
}

/* The graph: x -> mlp_part on every worker -> allreduce (or not). */
static int mlp_compile(cgr_ctx *ctx, cgr_worker **w, int with_allreduce,
		       const cgr_compile_params *pp, const char *dot,
		       cgr_compiled **out)
{
	cgr_graph *g;
	cgr_node *x, *part[TP], *sum[TP];
	int ret;

	cgr_graph_create(ctx, &g);
	cgr_graph_input(g, 0, &x);
	for (int i = 0; i < TP; i++) {
		cgr_task_desc d = CGR_TASK_DESC_INIT;
		d.name = "mlp_part", d.fn = mlp_part;
		cgr_graph_task(g, w[i], &d, &x, 1, &part[i], 1);
	}
	if (with_allreduce) {
		cgr_graph_allreduce(g, part, TP, CGR_SUM, NULL, sum);
		cgr_graph_output(g, sum, TP);
	} else {
		cgr_graph_output(g, part, TP);
	}
	if (dot != NULL)
		cgr_graph_write_dot(g, dot);
	ret = cgr_graph_compile(g, pp, out);
	if (ret != 0)
		fprintf(stderr, "tp-mlp compile: %s\n", cgr_graph_errmsg(g));
	cgr_graph_destroy(g);
	return ret;
}

#endif
