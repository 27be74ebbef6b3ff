/*
 * compile/edges.c: lowering device-transport edges.  Each task output with
 * the device transport becomes a broadcast collective from its producer to
 * the workers that read it, and those readers read the broadcast's copy:
 * one send for every reader, scheduled with all of them like any
 * collective.  Outputs of one task read by the same workers share one
 * bucketed broadcast (one fused operation).  The broadcasts are added to
 * the graph (nodes marked edge_lowered are not lowered twice).
 */
#include <stdio.h>
#include <string.h>

#include "compile/compile.h"

size_t cgr__edge_readers(const cgr_graph *g, const cgr_node *n,
			 cgr_worker *p, cgr_worker **m, size_t max)
{
	size_t nm = 1;

	m[0] = p;
	for (struct cgr__task *t = g->tasks; t != NULL; t = t->next)
		for (size_t i = 0; i < t->nin; i++) {
			cgr_worker *w;
			size_t j;
			if (t->in[i] != n)
				continue;
			w = cgr__in_worker(t, i);
			for (j = 0; j < nm; j++)
				if (m[j] == w)
					break;
			if (j == nm && nm < max)
				m[nm++] = w;
		}
	return nm;
}

static bool same_readers(cgr_worker *const *a, size_t na,
			      cgr_worker *const *b, size_t nb)
{
	if (na != nb)
		return false;
	for (size_t i = 0; i < na; i++) {
		size_t j;
		for (j = 0; j < nb; j++)
			if (a[i] == b[j])
				break;
		if (j == nb)
			return false;
	}
	return true;
}

/*
 * Each task output with the device transport becomes a broadcast from its
 * producer to the workers that read it, and those readers read the
 * broadcast's copy instead: one send for every reader, scheduled with all
 * of them like any collective.  Outputs of one task read by the same
 * workers share one bucketed broadcast (one fused operation).
 */
/* The readers of grp[0..k) (on workers m[1..nm)) read the broadcast
 * bc's copies (outs, member-major) instead. */
static void redirect(cgr_graph *g, struct cgr__task *bc, cgr_node *const *grp,
		     size_t k, cgr_worker *const *m, size_t nm,
		     cgr_node *const *outs)
{
	for (struct cgr__task *u = g->tasks; u != bc; u = u->next)
		for (size_t i = 0; i < u->nin; i++)
			for (size_t j = 0; j < k; j++) {
				cgr_worker *w;
				if (u->in[i] != grp[j])
					continue;
				w = cgr__in_worker(u, i);
				for (size_t r = 1; r < nm; r++)
					if (m[r] == w)
						u->in[i] = outs[r * k + j];
			}
	bc->edge = true;
	for (size_t j = 0; j < k; j++)
		grp[j]->edge_lowered = true;
}

/* The broadcast of grp[0..k) (outputs of t, from m[0] to m[1..nm)). */
static int edge_broadcast(cgr_graph *g, struct cgr__task *t,
			  cgr_node *const *grp, size_t k,
			  cgr_worker *const *m, size_t nm)
{
	cgr_node *n = grp[0], *outs[CGR_MAX_RANKS * 64 / 16];
	cgr_coll_params cp = CGR_COLL_PARAMS_INIT;
	struct cgr__task *bc;
	char name[80];
	int ret;

	if (nm * k > sizeof(outs) / sizeof(outs[0]))
		return cgr__graph_fail(g, -EINVAL,
				       "%s: too many readers for one device "
				       "edge",
				       n->name);
	snprintf(name, sizeof(name), "%s->device", n->name);
	cp.name = name;
	cp.kind = CGR_COLL_BROADCAST;
	cp.root = 0;
	cp.ntensors = k;
	cp.static_shape = k == 1 && (n->edge_flags & CGR_EDGE_STATIC_SHAPE);
	cp.max_out_bytes = t->max_out_bytes;
	cp.overlap = n->overlap;
	cp.backend = n->edge_flags & CGR_EDGE_NCCL ? CGR_BACKEND_NCCL :
		     n->edge_flags & CGR_EDGE_CPU  ? CGR_BACKEND_CPU :
						     CGR_BACKEND_AUTO;
	/* Across hosts: the NCCL communicator the compile made for it
	 * (over m, in this order: drive/graph_compile.c). */
	cp.comm = n->edge_comm;
	ret = cgr_graph_collective(g, &cp, m, nm, grp, k, outs, nm * k);
	if (ret < 0)
		return ret;
	for (bc = g->tasks; bc->next != NULL; bc = bc->next)
		; /* the broadcast just added */
	redirect(g, bc, grp, k, m, nm, outs);
	return 0;
}

int cgr__lower_edges(cgr_graph *g)
{
	static const size_t MAXM = CGR_MAX_RANKS, MAXK = 64;

	for (struct cgr__task *t = g->tasks; t != NULL; t = t->next) {
		if (t->edge)
			continue;
		for (size_t o = 0; o < t->nout; o++) {
			cgr_node *n = t->out[o], *grp[64] = { NULL };
			cgr_worker *m[CGR_MAX_RANKS], *m2[CGR_MAX_RANKS], *p;
			size_t nm, k = 0;
			int ret;

			if (n->transport != CGR_TRANSPORT_DEVICE ||
			    n->edge_lowered)
				continue;
			p = cgr__out_worker(t, o);
			nm = cgr__edge_readers(g, n, p, m, MAXM);
			if (nm == 1)
				return cgr__graph_fail(
					g, -EINVAL,
					"%s has the device transport but no "
					"reader on another worker than %s",
					n->name, p->name);
			/* Later outputs of t with the same readers join. */
			for (size_t q = o; q < t->nout && k < MAXK; q++) {
				cgr_node *u = t->out[q];
				if (u->transport != CGR_TRANSPORT_DEVICE ||
				    u->edge_lowered ||
				    cgr__out_worker(t, q) != p)
					continue;
				size_t n2 = cgr__edge_readers(g, u, p, m2, MAXM);
				if (q == o || same_readers(m, nm, m2, n2))
					grp[k++] = u;
			}
			ret = edge_broadcast(g, t, grp, k, m, nm);
			if (ret < 0)
				return ret;
		}
	}
	return 0;
}
