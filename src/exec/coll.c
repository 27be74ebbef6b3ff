/*
 * exec/coll.c: a worker's share of a collective node.
 *
 * Agreement first: each member posts a description of its input (value
 * kind, dtype, shape, or its error) on the collective's board for this
 * execution, rings the other members, and waits until all have posted.
 * Every member then runs the same comparison over the same descriptions,
 * so all of them reach the same verdict: either an error value on every
 * output (naming the ranks and what differed), or the communicator call,
 * with counts and output shapes derived identically everywhere.  Nobody
 * can be left waiting inside the communicator for a member that decided
 * otherwise.
 *
 * The board has one description per member per buffer slot, plus a
 * per-member "done" sequence: a member does not overwrite slot s until
 * every member finished comparing the execution that used it before.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "graph/internal.h"

struct cgr__agree {
	_Atomic uint64_t seq; /* execution + 1 once posted */
	int32_t kind;	      /* value kind; CGR_VALUE_NONE: no input here */
	int32_t code;	      /* error value: its code */
	int32_t dtype;	      /* cgr_dtype, -1 if none */
	int32_t ndim;
	int64_t shape[CGR_MAX_NDIM];
	char msg[CGR__AGREE_SIZE - 24 - 8 * CGR_MAX_NDIM];
};
_Static_assert(sizeof(struct cgr__agree) == CGR__AGREE_SIZE,
	       "agreement record size");

struct cgr__coll_board {
	uint32_t n, k, nslots; /* members, tensors per member, slots */
	struct cgr_bell **bells; /* each member worker's doorbell */
	/* followed by done[n] (a line each), then agree[nslots][n] */
};

struct cgr__done {
	_Atomic uint64_t seq;
	char pad[CGR_CACHELINE - 8];
};

static size_t cgr__board_hdr(size_t n)
{
	return CGR__ALIGN_UP(sizeof(struct cgr__coll_board), 64) +
	       CGR__ALIGN_UP(n * sizeof(struct cgr_bell *), 64);
}

size_t cgr__coll_board_size(size_t n, size_t k, uint32_t nslots)
{
	return cgr__board_hdr(n) + n * sizeof(struct cgr__done) +
	       (size_t)nslots * n * k * sizeof(struct cgr__agree);
}

static struct cgr__done *cgr__board_done(struct cgr__coll_board *b)
{
	return (struct cgr__done *)((unsigned char *)b + cgr__board_hdr(b->n));
}

static struct cgr__agree *cgr__board_slot(struct cgr__coll_board *b,
					  uint64_t seq)
{
	unsigned char *base = (unsigned char *)cgr__board_done(b) +
			      b->n * sizeof(struct cgr__done);
	return (struct cgr__agree *)(base + (size_t)(seq & (b->nslots - 1)) *
						    b->n * b->k *
						    sizeof(struct cgr__agree));
}

void cgr__coll_board_init(struct cgr__coll_board *b, size_t n, size_t k,
			  uint32_t nslots, cgr_worker *const *members)
{
	struct cgr__done *d;

	b->n = (uint32_t)n;
	b->k = (uint32_t)k;
	b->nslots = nslots;
	b->bells = (struct cgr_bell **)((unsigned char *)b +
					CGR__ALIGN_UP(sizeof(*b), 64));
	for (size_t i = 0; i < n; i++)
		b->bells[i] = &members[i]->bell;
	d = cgr__board_done(b);
	for (size_t i = 0; i < n; i++)
		atomic_init(&d[i].seq, 0);
	for (uint32_t s = 0; s < nslots; s++) {
		struct cgr__agree *a = cgr__board_slot(b, s);
		for (size_t i = 0; i < n * k; i++)
			atomic_init(&a[i].seq, 0);
	}
}

/* ---- describing and comparing ------------------------------------- */

static void cgr__describe(struct cgr__agree *a, const cgr_value *v, bool has)
{
	a->kind = has ? v->kind : CGR_VALUE_NONE;
	a->code = 0;
	a->dtype = -1;
	a->ndim = 0;
	a->msg[0] = 0;
	if (!has)
		return;
	switch (v->kind) {
	case CGR_VALUE_ERROR:
		a->code = v->code;
		snprintf(a->msg, sizeof(a->msg), "%s", v->u.error.msg);
		break;
	case CGR_VALUE_BYTES:
		a->dtype = CGR_UINT8;
		a->ndim = 1;
		a->shape[0] = (int64_t)v->u.bytes.len;
		break;
	case CGR_VALUE_TENSOR:
		a->dtype = cgr__dtype_of_dl(v->u.tensor.dtype.code,
					    v->u.tensor.dtype.bits,
					    v->u.tensor.dtype.lanes);
		a->ndim = v->u.tensor.ndim;
		for (int i = 0; i < a->ndim; i++)
			a->shape[i] = v->u.tensor.shape[i];
		break;
	default:
		break;
	}
}

static int cgr__fmt_shape(char *buf, size_t len, const struct cgr__agree *a)
{
	size_t off = 0;

	if (a->kind == CGR_VALUE_NONE)
		return snprintf(buf, len, "nothing");
	off += (size_t)snprintf(buf, len, "%s[", a->kind == CGR_VALUE_BYTES ?
							 "bytes" :
							 "");
	for (int i = 0; i < a->ndim && off < len; i++)
		off += (size_t)snprintf(buf + off, len - off, "%s%lld",
					i ? "," : "", (long long)a->shape[i]);
	if (off < len)
		off += (size_t)snprintf(buf + off, len - off, "] %s",
					cgr__dtype_name(a->dtype));
	return (int)off;
}

static bool cgr__same_shape(const struct cgr__agree *a,
			    const struct cgr__agree *b)
{
	if (a->kind != b->kind || a->dtype != b->dtype || a->ndim != b->ndim)
		return false;
	for (int i = 0; i < a->ndim; i++)
		if (a->shape[i] != b->shape[i])
			return false;
	return true;
}

struct cgr__verdict {
	int err;
	char msg[640];
	struct cgr__agree out; /* the output's description */
	size_t count;	       /* elements for the communicator call */
	size_t in_bytes, out_bytes;
};

static bool cgr__has_input(int kind, int rank, int root)
{
	return !cgr__coll_in_at_root(kind) || rank == root;
}

/*
 * The verdict every member reaches from the same n descriptions.  cap is
 * the data capacity of the collective's output buffers.
 */
static void cgr__judge(const struct cgr__coll_rt *cr, uint64_t seq,
		       const struct cgr__agree *all, size_t stride, size_t cap,
		       struct cgr__verdict *v)
{
#define d(r) (all[(size_t)(r) * stride])
	const int n = cr->n, kind = cr->kind;
	const struct cgr__agree *ref = NULL;
	char pre[120], sa[120], sb[120];
	size_t nelem = 1, esz;

	memset(v, 0, sizeof(*v));
	snprintf(pre, sizeof(pre), "%s %s (execution %llu)",
		 cgr__coll_name(kind), cr->name, (unsigned long long)seq);
	for (int r = 0; r < n; r++)
		if (d(r).kind == CGR_VALUE_ERROR) {
			v->err = d(r).code ? d(r).code : CGR_ETASK;
			snprintf(v->msg, sizeof(v->msg),
				 "%s: rank %d contributed an error value: %s",
				 pre, r, d(r).msg);
			return;
		}
	for (int r = 0; r < n; r++) {
		if (!cgr__has_input(kind, r, cr->root))
			continue;
		if ((d(r).kind != CGR_VALUE_BYTES &&
		     d(r).kind != CGR_VALUE_TENSOR) ||
		    d(r).dtype < 0) {
			v->err = CGR_EBADVALUE;
			snprintf(v->msg, sizeof(v->msg),
				 "%s: rank %d has no tensor of a supported "
				 "dtype (value kind %d)",
				 pre, r, d(r).kind);
			return;
		}
		if (ref == NULL) {
			ref = &d(r);
			continue;
		}
		if (!cgr__same_shape(ref, &d(r))) {
			int r0 = (int)((ref - all) / (ptrdiff_t)stride);
			cgr__fmt_shape(sa, sizeof(sa), ref);
			cgr__fmt_shape(sb, sizeof(sb), &d(r));
			v->err = CGR_EMISMATCH;
			snprintf(v->msg, sizeof(v->msg),
				 "%s: %s mismatch: rank %d has %s, rank %d "
				 "has %s",
				 pre,
				 ref->dtype != d(r).dtype ? "dtype" : "shape",
				 r0, sa, r, sb);
			return;
		}
	}
	v->out = *ref;
	for (int i = 0; i < ref->ndim; i++)
		nelem *= (size_t)ref->shape[i];
	esz = cgr_dtype_size((cgr_dtype)ref->dtype);
	v->in_bytes = nelem * esz;
	v->count = nelem;
	if (kind == CGR_COLL_ALLGATHER || kind == CGR_COLL_GATHER) {
		if (v->out.ndim == 0) {
			v->out.ndim = 1;
			v->out.shape[0] = 1;
		}
		v->out.shape[0] *= n;
		v->out_bytes = v->in_bytes * (size_t)n;
	} else if (kind == CGR_COLL_REDUCESCATTER ||
		   kind == CGR_COLL_SCATTER || kind == CGR_COLL_ALLTOALL) {
		if (ref->ndim == 0 || ref->shape[0] % n != 0) {
			v->err = -EINVAL;
			snprintf(v->msg, sizeof(v->msg),
				 "%s: dimension 0 (%lld) does not divide by "
				 "%d ranks",
				 pre, ref->ndim ? (long long)ref->shape[0] : 0LL,
				 n);
			return;
		}
		v->count = nelem / (size_t)n;
		if (kind != CGR_COLL_ALLTOALL) {
			v->out.shape[0] /= n;
			v->out_bytes = v->in_bytes / (size_t)n;
		} else {
			v->out_bytes = v->in_bytes;
		}
	} else {
		v->out_bytes = v->in_bytes;
	}
	if (v->out_bytes > cap) {
		v->err = CGR_ETOOBIG;
		snprintf(v->msg, sizeof(v->msg),
			 "%s: result of %zu bytes exceeds the %zu-byte output "
			 "buffer (set max_out_bytes)",
			 pre, v->out_bytes, cap);
	}
#undef d
}

/* ---- running ------------------------------------------------------ */

struct cgr__posted {
	struct cgr__agree *slot;
	int n; /* records: members x tensors */
	uint64_t want;
};

static bool cgr__all_posted(void *arg)
{
	struct cgr__posted *p = arg;
	for (int r = 0; r < p->n; r++)
		/* A1: pairs with the release store of each member's post. */
		if (atomic_load_explicit(&p->slot[r].seq,
					 memory_order_acquire) != p->want)
			return false;
	return true;
}

struct cgr__drained {
	struct cgr__done *done;
	int n;
	uint64_t floor;
};

static bool cgr__all_done(void *arg)
{
	struct cgr__drained *p = arg;
	for (int r = 0; r < p->n; r++)
		if (atomic_load_explicit(&p->done[r].seq,
					 memory_order_acquire) < p->floor)
			return false;
	return true;
}

static void cgr__ring_members(struct cgr__coll_board *b, int self)
{
	for (uint32_t r = 0; r < b->n; r++)
		if ((int)r != self)
			cgr__bell_ring(b->bells[r]);
}

static void cgr__coll_fail(struct cgr__coll_rt *cr, uint64_t seq, int err,
			   const char *msg)
{
	for (size_t j = 0; j < cr->k; j++) {
		struct cgr__port *p;
		if (cr->out_ports[j] == CGR__NO_PORT)
			continue;
		p = &cr->c->ports[cr->out_ports[j]];
		cgr__value_store_error(cgr__port_slot(p, seq), p->cap, err,
				       msg);
	}
}

/* Posts this member's description and waits for everybody's.  Returns
 * 0, or -ECANCELED at teardown.  The overlap pass relies on this wait:
 * a member that got past it knows every member started this collective
 * (compile.c, cgr__kn_finish). */
static int cgr__agree_all(struct cgr__coll_rt *cr, uint64_t seq,
			  const struct cgr__agree *mine, struct cgr__agree *all,
			  struct cgr_reactor *r)
{
	struct cgr_compiled *c = cr->c;
	struct cgr__coll_board *b = cr->board;
	struct cgr__done *done = cgr__board_done(b);
	struct cgr__agree *slot = cgr__board_slot(b, seq);
	int ret;

	/* The slot's previous execution must be compared by everybody. */
	if (seq >= b->nslots) {
		struct cgr__drained dr = { done, cr->n, seq + 1 - b->nslots };
		ret = cgr__reactor_wait(r, &cr->w->bell, cgr__all_done, &dr,
					&c->stop, c->p.wait_mode, c->p.spin_ns,
					CGR_FOREVER);
		if (ret < 0)
			return ret;
	}
	for (size_t j = 0; j < cr->k; j++) {
		struct cgr__agree *a = &slot[(size_t)cr->rank * cr->k + j];
		memcpy((char *)a + sizeof(a->seq),
		       (const char *)&mine[j] + sizeof(mine->seq),
		       sizeof(*mine) - sizeof(mine->seq));
		/* R1: publishes the description; pairs with A1. */
		atomic_store_explicit(&a->seq, seq + 1, memory_order_release);
	}
	cgr__ring_members(b, cr->rank);
	struct cgr__posted po = { slot, cr->n * (int)cr->k, seq + 1 };
	ret = cgr__reactor_wait(r, &cr->w->bell, cgr__all_posted, &po,
				&c->stop, c->p.wait_mode, c->p.spin_ns,
				CGR_FOREVER);
	if (ret < 0)
		return ret;
	memcpy(all, slot, (size_t)cr->n * cr->k * sizeof(*all));
	atomic_store_explicit(&done[cr->rank].seq, seq + 1,
			      memory_order_release);
	cgr__ring_members(b, cr->rank);
	return 0;
}

/* cgr_compile_params.sim_comm_ns: the modelled duration, after agreement
 * and before the data moves; cut short by teardown (slept in slices). */
static void cgr__sim_comm(struct cgr__coll_rt *cr)
{
	int64_t left = cr->c->p.sim_comm_ns;

	while (left > 0 && !atomic_load_explicit(&cr->c->stop,
						 memory_order_relaxed)) {
		int64_t ns = left < 20000000 ? left : 20000000;
		struct timespec ts = { 0, (long)ns };
		nanosleep(&ts, NULL);
		left -= ns;
	}
}

static int cgr__coll_call(struct cgr__coll_rt *cr, const void *in, void *out,
			  size_t count, cgr_dtype dt)
{
	cgr_comm *m = cr->comm;
	const int rk = cr->rank, root = cr->root;
	const bool is_root = rk == root;

	cgr__sim_comm(cr);

	switch (cr->kind) {
	case CGR_COLL_ALLREDUCE:
		return cgr_allreduce(m, rk, in, out, count, dt, cr->op, NULL,
				     NULL);
	case CGR_COLL_ALLGATHER:
		return cgr_allgather(m, rk, in, out, count, dt, NULL, NULL);
	case CGR_COLL_REDUCESCATTER:
		return cgr_reducescatter(m, rk, in, out, count, dt, cr->op,
					 NULL, NULL);
	case CGR_COLL_REDUCE:
		return cgr_reduce(m, rk, in, is_root ? out : NULL, count, dt,
				  cr->op, root, NULL, NULL);
	case CGR_COLL_BROADCAST:
		/* A device edge's root keeps no copy: in place. */
		if (is_root && out == NULL)
			out = (void *)in;
		return cgr_broadcast(m, rk, is_root ? in : NULL, out, count, dt,
				     root, NULL, NULL);
	case CGR_COLL_GATHER:
		return cgr_gather(m, rk, in, is_root ? out : NULL, count, dt,
				  root, NULL, NULL);
	case CGR_COLL_SCATTER:
		return cgr_scatter(m, rk, is_root ? in : NULL, out, count, dt,
				   root, NULL, NULL);
	case CGR_COLL_ALLTOALL:
		return cgr_alltoall(m, rk, in, out, count, dt, NULL, NULL);
	default:
		return -EINVAL;
	}
}

/* Writes the header of an output slot from the verdict. */
static void cgr__set_out(struct cgr__slot_hdr *oh, const struct cgr__verdict *v)
{
	oh->code = 0;
	oh->len = v->out_bytes;
	if (v->out.kind == CGR_VALUE_BYTES) {
		oh->kind = CGR_VALUE_BYTES;
		oh->ndim = 0;
		return;
	}
	oh->kind = CGR_VALUE_TENSOR;
	oh->ndim = v->out.ndim;
	cgr__dtype_to_dl(v->out.dtype, &oh->dt_code, &oh->dt_bits);
	oh->dt_lanes = 1;
	oh->dev_type = kDLCPU;
	oh->dev_id = 0;
	for (int i = 0; i < v->out.ndim; i++)
		oh->shape[i] = v->out.shape[i];
}

int cgr__coll_rt_init(struct cgr__coll_rt *cr)
{
	struct cgr_compiled *c = cr->c;
	size_t n = (size_t)cr->n, k = cr->k;

	cr->mine = cgr__c_alloc(c, k * sizeof(struct cgr__agree), 64);
	cr->cached = cgr__c_alloc(c, n * k * sizeof(struct cgr__agree), 64);
	if (cr->mine == NULL || cr->cached == NULL)
		return -ENOMEM;
	if (k == 1 && cr->edge) {
		/* Lists over a device edge: their tensors travel packed. */
		cr->bucket_in = cgr__c_alloc(c, cr->cap, 64);
		cr->bucket_out = cgr__c_alloc(c, cr->cap, 64);
		return cr->bucket_in && cr->bucket_out ? 0 : -ENOMEM;
	}
	if (k == 1)
		return 0;
	cr->verdicts = cgr__c_alloc(c, k * sizeof(struct cgr__verdict), 64);
	cr->bucket_in = cgr__c_alloc(c, k * cr->cap, 64);
	cr->bucket_out = cgr__c_alloc(
		c, k * cr->cap * (cr->kind == CGR_COLL_ALLGATHER ? n : 1), 64);
	return cr->verdicts && cr->bucket_in && cr->bucket_out ? 0 : -ENOMEM;
}

/*
 * A bucket: k tensors per member, one fused allreduce or allgather.  The
 * inputs are packed back to back, moved in one operation, and unpacked
 * into the k outputs (for allgather, rank q's block of tensor j is at
 * q * total + offset j of the gathered bucket).
 */
static void cgr__coll_run_bucket(struct cgr__coll_rt *cr, uint64_t seq,
				 struct cgr_reactor *r)
{
	struct cgr_compiled *c = cr->c;
	struct cgr__verdict *v = cr->verdicts;
	const size_t k = cr->k, n = (size_t)cr->n;
	const void *src[64];
	size_t total = 0, esz, off;
	char msg[700];
	int ret;

	for (size_t j = 0; j < k; j++) {
		cgr_value in;
		bool has = cr->in_ports[j] != CGR__NO_PORT;
		memset(&in, 0, sizeof(in));
		if (has)
			cgr__value_load(
				cgr__port_slot(&c->ports[cr->in_ports[j]], seq),
				&in);
		cgr__describe(&cr->mine[j], &in, has);
		src[j] = !has ? NULL :
			 in.kind == CGR_VALUE_TENSOR ? in.u.tensor.data :
						       in.u.bytes.data;
	}
	ret = cgr__agree_all(cr, seq, cr->mine, cr->cached, r);
	if (ret < 0)
		return; /* teardown */
	for (size_t j = 0; j < k; j++) {
		cgr__judge(cr, seq, cr->cached + j, k, cr->cap, &v[j]);
		if (v[j].err == 0 && v[j].out.dtype != v[0].out.dtype) {
			v[j].err = -EINVAL;
			snprintf(v[j].msg, sizeof(v[j].msg),
				 "tensors of a bucket must share a dtype: "
				 "tensor 0 is %s, tensor %zu is %s",
				 cgr__dtype_name(v[0].out.dtype), j,
				 cgr__dtype_name(v[j].out.dtype));
		}
		if (v[j].err != 0) {
			snprintf(msg, sizeof(msg), "tensor %zu of %zu: %s", j, k,
				 v[j].msg);
			cgr__coll_fail(cr, seq, v[j].err, msg);
			return;
		}
		total += v[j].count;
	}
	esz = cgr_dtype_size((cgr_dtype)v[0].out.dtype);
	off = 0;
	for (size_t j = 0; j < k && src[0] != NULL; j++) {
		memcpy(cr->bucket_in + off * esz, src[j], v[j].count * esz);
		off += v[j].count;
	}
	cgr__sim_comm(cr);
	if (cr->kind == CGR_COLL_BROADCAST) {
		bool root = cr->rank == cr->root;
		ret = cgr_broadcast(cr->comm, cr->rank,
				    root ? cr->bucket_in : NULL,
				    root ? cr->bucket_in : cr->bucket_out, total,
				    (cgr_dtype)v[0].out.dtype, cr->root, NULL,
				    NULL);
	} else if (cr->kind == CGR_COLL_ALLREDUCE)
		ret = cgr_allreduce(cr->comm, cr->rank, cr->bucket_in,
				    cr->bucket_out, total,
				    (cgr_dtype)v[0].out.dtype, cr->op, NULL,
				    NULL);
	else
		ret = cgr_allgather(cr->comm, cr->rank, cr->bucket_in,
				    cr->bucket_out, total,
				    (cgr_dtype)v[0].out.dtype, NULL, NULL);
	if (ret < 0) {
		const char *why = cgr_comm_errmsg(cr->comm, cr->rank);
		snprintf(msg, sizeof(msg), "%s %s (execution %llu): %s",
			 cgr__coll_name(cr->kind), cr->name,
			 (unsigned long long)seq,
			 why != NULL && *why ? why : cgr_strerror(ret));
		cgr__coll_fail(cr, seq, ret, msg);
		return;
	}
	off = 0;
	for (size_t j = 0; j < k; off += v[j].count, j++) {
		if (cr->out_ports[j] == CGR__NO_PORT)
			continue; /* a device edge's root keeps no copy */
		struct cgr__slot_hdr *oh =
			cgr__port_slot(&c->ports[cr->out_ports[j]], seq);
		unsigned char *dst = cgr__slot_data(oh);
		size_t bytes = v[j].count * esz;
		if (cr->kind != CGR_COLL_ALLGATHER)
			memcpy(dst, cr->bucket_out + off * esz, bytes);
		else
			for (size_t q = 0; q < n; q++)
				memcpy(dst + q * bytes,
				       cr->bucket_out + (q * total + off) * esz,
				       bytes);
		cgr__set_out(oh, &v[j]);
	}
}

/*
 * A list over a device edge (mixed value): every reader lays the list out
 * from the producer's slot, copying the bytes items through host memory,
 * while the tensor items' data moves through the communicator, packed into
 * one broadcast.
 */
static void cgr__coll_run_list(struct cgr__coll_rt *cr, uint64_t seq)
{
	struct cgr_compiled *c = cr->c;
	struct cgr__slot_hdr *rh =
		cgr__port_slot(&c->ports[cr->root_port], seq);
	bool root = cr->rank == cr->root;
	struct cgr__slot_hdr *oh = NULL;
	cgr_value rv, ov;
	size_t total = 0, off = 0;
	char msg[400];
	int ret;

	cgr__value_load(rh, &rv);
	for (size_t i = 0; i < rv.u.list.n; i++)
		if (rv.u.list.items[i].kind == CGR_VALUE_TENSOR)
			total += cgr_tensor_nbytes(&rv.u.list.items[i].u.tensor);
	if (total > cr->cap || rh->len > cr->cap) {
		snprintf(msg, sizeof(msg),
			 "broadcast %s (execution %llu): list of %llu bytes "
			 "exceeds the %zu-byte buffer",
			 cr->name, (unsigned long long)seq,
			 (unsigned long long)rh->len, cr->cap);
		cgr__coll_fail(cr, seq, CGR_ETOOBIG, msg);
		return;
	}
	if (root) {
		for (size_t i = 0; i < rv.u.list.n; i++) {
			const DLTensor *t = &rv.u.list.items[i].u.tensor;
			size_t b;
			if (rv.u.list.items[i].kind != CGR_VALUE_TENSOR)
				continue;
			b = cgr_tensor_nbytes(t);
			memcpy(cr->bucket_in + off, t->data, b);
			off += b;
		}
	} else if (cr->out_ports[0] != CGR__NO_PORT) {
		oh = cgr__port_slot(&c->ports[cr->out_ports[0]], seq);
		cgr__list_store(oh, &rv, false);
	}
	cgr__sim_comm(cr);
	ret = cgr_broadcast(cr->comm, cr->rank, root ? cr->bucket_in : NULL,
			    root ? cr->bucket_in : cr->bucket_out, total,
			    CGR_UINT8, cr->root, NULL, NULL);
	if (ret < 0) {
		const char *why = cgr_comm_errmsg(cr->comm, cr->rank);
		snprintf(msg, sizeof(msg), "broadcast %s (execution %llu): %s",
			 cr->name, (unsigned long long)seq,
			 why != NULL && *why ? why : cgr_strerror(ret));
		cgr__coll_fail(cr, seq, ret, msg);
		return;
	}
	if (oh == NULL)
		return;
	cgr__value_load(oh, &ov);
	off = 0;
	for (size_t i = 0; i < ov.u.list.n; i++) {
		const DLTensor *t = &ov.u.list.items[i].u.tensor;
		size_t b;
		if (ov.u.list.items[i].kind != CGR_VALUE_TENSOR)
			continue;
		b = cgr_tensor_nbytes(t);
		memcpy(t->data, cr->bucket_out + off, b);
		off += b;
	}
}

void cgr__coll_run(struct cgr__coll_rt *cr, uint64_t seq,
		   struct cgr_reactor *r)
{
	struct cgr_compiled *c = cr->c;
	struct cgr__agree *mine = cr->mine, *all = cr->cached;
	struct cgr__verdict v;
	cgr_value in;
	const void *src = NULL;
	void *dst = NULL;
	struct cgr__slot_hdr *oh = NULL;
	int ret;

	if (cr->k > 1) {
		cgr__coll_run_bucket(cr, seq, r);
		return;
	}
	memset(&in, 0, sizeof(in));
	if (cr->in_ports[0] != CGR__NO_PORT)
		cgr__value_load(cgr__port_slot(&c->ports[cr->in_ports[0]], seq),
				&in);
	cgr__describe(mine, &in, cr->in_ports[0] != CGR__NO_PORT);
	bool changed = false;
	/* Lists always agree: their host part is read from the producer's
	 * slot, which only the agreement orders after its writing. */
	if (!cr->static_shape || !cr->have_cached ||
	    (cr->edge && all[cr->root].kind == CGR_VALUE_LIST)) {
		ret = cgr__agree_all(cr, seq, mine, all, r);
		if (ret < 0)
			return; /* teardown */
		cr->have_cached = true;
		if (cr->edge && all[cr->root].kind == CGR_VALUE_LIST) {
			cgr__coll_run_list(cr, seq);
			return;
		}
	} else {
		/* Static shapes: the first agreement holds for everybody; only
		 * this member's own change is visible here. */
		changed = !cgr__same_shape(mine, &all[cr->rank]) ||
			  mine->kind == CGR_VALUE_ERROR;
	}
	cgr__judge(cr, seq, all, 1, cr->cap, &v);
	if (v.err != 0) {
		cgr__coll_fail(cr, seq, v.err, v.msg);
		return;
	}
	size_t count = v.count;
	if (changed && cgr__has_input(cr->kind, cr->rank, cr->root)) {
		/* Still take part, with the count this member really has: the
		 * communicator's own check fails everybody on a different
		 * count, and no result can overflow its buffer. */
		size_t ne = mine->kind == CGR_VALUE_ERROR ? 0 : 1;
		for (int i = 0; i < mine->ndim; i++)
			ne *= (size_t)mine->shape[i];
		if (cr->kind == CGR_COLL_REDUCESCATTER ||
		    cr->kind == CGR_COLL_SCATTER || cr->kind == CGR_COLL_ALLTOALL)
			ne /= (size_t)cr->n;
		count = ne == v.count ? ne : (ne < v.count ? ne : 0);
	}
	if (cr->in_ports[0] != CGR__NO_PORT)
		src = in.kind == CGR_VALUE_TENSOR ? in.u.tensor.data :
						    in.u.bytes.data;
	if (cr->out_ports[0] != CGR__NO_PORT) {
		oh = cgr__port_slot(&c->ports[cr->out_ports[0]], seq);
		dst = cgr__slot_data(oh);
	}
	ret = cgr__coll_call(cr, src, dst, count, (cgr_dtype)v.out.dtype);
	if (ret == 0 && changed) {
		char msg[400], sa[120], sb[120];
		cgr__fmt_shape(sa, sizeof(sa), &all[cr->rank]);
		cgr__fmt_shape(sb, sizeof(sb), mine);
		snprintf(msg, sizeof(msg),
			 "%s %s (execution %llu): rank %d changed its static "
			 "shape from %s to %s",
			 cgr__coll_name(cr->kind), cr->name,
			 (unsigned long long)seq, cr->rank, sa, sb);
		cgr__coll_fail(cr, seq, CGR_EMISMATCH, msg);
		return;
	}
	if (ret < 0) {
		char msg[400];
		const char *why = cgr_comm_errmsg(cr->comm, cr->rank);
		snprintf(msg, sizeof(msg), "%s %s (execution %llu): %s",
			 cgr__coll_name(cr->kind), cr->name,
			 (unsigned long long)seq,
			 why != NULL && *why ? why : cgr_strerror(ret));
		cgr__coll_fail(cr, seq, ret, msg);
		return;
	}
	if (oh != NULL)
		cgr__set_out(oh, &v);
}

bool cgr__coll_member(const struct cgr__coll_rt *cr, const cgr_worker *w)
{
	for (uint32_t r = 0; r < cr->board->n; r++)
		if (cr->board->bells[r] == &w->bell)
			return true;
	return false;
}
