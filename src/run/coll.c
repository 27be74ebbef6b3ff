/*
 * run/coll.c: a worker's share of a collective node.
 *
 * Agreement first: each member posts a description of its input (value
 * kind, dtype, shape, or its error) on the collective's board for this
 * execution (chan/board.h) and waits until all have posted.  Every member
 * then runs the same comparison over the same descriptions (the
 * agreement's, comm/agree.h, which the communicators use too), so all of
 * them reach the same verdict: either an error value on every output
 * (naming the ranks and what differed), or the communicator call, with
 * counts and output shapes derived identically everywhere.  Nobody can be
 * left waiting inside the communicator for a member that decided
 * otherwise.  The communicator is told that its operation was agreed
 * (`agreed`), so it uses that verdict instead of comparing again; only a
 * poison that arises since (a device failure) still fails it everywhere.
 * With static shapes only the first execution that agrees without an
 * error agrees; later a member that changed its shape (or dtype)
 * poisons the CPU communicator's operation with CGR_EMISMATCH and what
 * changed, so every member fails before any data moves, naming it, and a
 * member whose input is an error value poisons it with CGR_ETASK.  NCCL
 * checks nothing (different counts hang or corrupt), so there every
 * member takes part with the agreed count, one whose input changed
 * sending from a scratch buffer, and posts its description anyway: once
 * the data moved, every member collects all of them and reaches the same
 * late verdict (a change or an error value anywhere fails every member's
 * outputs, naming the rank).  The post costs no wait before the launch.
 *
 * Error values keep their origin: a member's error value is not retold
 * from its description (which holds a cut copy) but read from that
 * member's input slot, once every member described its input (after the
 * agreement, or the communicator's), and forwarded whole, this
 * collective added to its path.  What the collective itself finds wrong
 * (a mismatch, its communicator failing) arises here: the collective,
 * on this member, is the origin.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "comm/reduce.h"
#include "run/run.h"

/* ---- the agreement (comm/agree.h) -------------------------------- */

static bool has_input(int kind, int rank, int root)
{
	return cgr__agree_has_input(kind, rank, root);
}

/* The verdict every member reaches from the same n records (all, one
 * every stride records); cap is the data capacity of the collective's
 * output buffers. */
static void judge(const struct cgr__coll_rt *cr, const struct cgr__agree *all,
		  size_t stride, size_t cap, struct cgr__verdict *v)
{
	cgr__agree_inputs(cr->kind, cr->n, cr->root, all, stride * sizeof(*all),
			  cap, v);
}

/* ---- running ------------------------------------------------------ */

/* Every output of this member for execution seq becomes an error value
 * arising here (the collective is its origin): err, msg. */
static void coll_fail(struct cgr__coll_rt *cr, uint64_t seq, int err,
		      const char *msg)
{
	const struct cgr__origin o = { cgr__coll_kind_name(cr->kind), cr->name,
				       cr->w->name, seq };

	for (size_t j = 0; j < cr->k; j++) {
		struct cgr__port *p;
		if (cr->out_ports[j] == CGR__NO_PORT)
			continue;
		p = &cr->c->ports[cr->out_ports[j]];
		cgr__error_store(cgr__port_slot(p, seq), p->cap, err, &o, msg);
	}
}

/* The slot of rank's input j for execution seq if it holds an error value
 * that loads safely (another process may have written it), else NULL.
 * Called once every member described its inputs (the agreement, or the
 * communicator's own): the slot is complete. */
static struct cgr__slot_hdr *error_input(const struct cgr__coll_rt *cr,
					 uint64_t seq, int rank, size_t j)
{
	unsigned pi = cr->all_in_ports[(size_t)rank * cr->k + j];
	const struct cgr__port *p;
	struct cgr__slot_hdr *h;

	if (pi == CGR__NO_PORT)
		return NULL;
	p = &cr->c->ports[pi];
	h = cgr__port_slot(p, seq);
	if (h->kind != CGR_VALUE_ERROR ||
	    (cr->c->seg != NULL &&
	     cgr__slot_check(h, p->cap, cgr__port_big_off(p, h)) < 0))
		return NULL;
	return h;
}

/* Error value eh (a member's input) to every output of this member. */
static void forward_from(struct cgr__coll_rt *cr, uint64_t seq,
			 const struct cgr__slot_hdr *eh)
{
	char hop[CGR__ERR_NAME + 24];

	snprintf(hop, sizeof(hop), "%s %s", cgr__coll_kind_name(cr->kind),
		 cr->name);
	for (size_t q = 0; q < cr->k; q++) {
		struct cgr__port *p;
		if (cr->out_ports[q] == CGR__NO_PORT)
			continue;
		p = &cr->c->ports[cr->out_ports[q]];
		cgr__error_forward(cgr__port_slot(p, seq), p->cap, eh, hop);
	}
}

static void far_forward(struct cgr__coll_rt *cr, uint64_t seq, int from,
			size_t j, int err, const char *msg);

/* Rank `from` contributed an error value as its input j: it reaches every
 * output of this member, its origin kept, this collective added to its
 * path.  Without one there (an error only its description shows, such as
 * bytes on NCCL) the collective is the origin: err, msg.  On a
 * communicator across hosts every member takes it from `from`
 * (far_forward). */
static void coll_forward(struct cgr__coll_rt *cr, uint64_t seq, int from,
			 size_t j, int err, const char *msg)
{
	struct cgr__slot_hdr *eh;

	if (cr->far) {
		far_forward(cr, seq, from, j, err, msg);
		return;
	}
	if ((eh = error_input(cr, seq, from, j)) == NULL) {
		coll_fail(cr, seq, err, msg);
		return;
	}
	forward_from(cr, seq, eh);
}

/* A verdict that fails: forwarded from the rank that contributed an error
 * value to input j, or arising here. */
static void verdict_fail(struct cgr__coll_rt *cr, uint64_t seq,
			 const struct cgr__verdict *v, size_t j,
			 const char *msg)
{
	if (v->from >= 0)
		coll_forward(cr, seq, v->from, j, v->err, msg);
	else
		coll_fail(cr, seq, v->err, msg);
}

/* The communicator failed on this member: its outputs name why.  On
 * NCCL that is a device failure (CGR_EDEVICE: an asynchronous NCCL
 * error, a deadline, a dead stream, an abort). */
static void comm_fail(struct cgr__coll_rt *cr, uint64_t seq, int ret)
{
	const char *why = cgr_comm_errmsg(cr->comm, cr->rank);

	coll_fail(cr, seq, cr->nccl ? CGR_EDEVICE : ret,
		  why != NULL && *why ? why : cgr_strerror(ret));
}

/* Posts this member's k descriptions (cr->mine) and waits for everybody's
 * (into cr->cached).  Returns 0, or -ECANCELED at teardown.  The overlap
 * pass relies on this wait: a member that got past it knows every member
 * started this collective (compile/prune.c, kn_finish). */
static int agree(struct cgr__coll_rt *cr, uint64_t seq, struct cgr__reactor *r)
{
	struct cgr_compiled *c = cr->c;

	return cgr__board_exchange(cr->board, cr->rank, seq, cr->mine,
				   cr->cached, r, &c->ctl->stop, c->p.wait_mode,
				   c->p.spin_ns);
}

/* cgr_compile_params.sim_comm_ns: the modelled duration, after agreement
 * and before the data moves; cut short by teardown (slept in slices). */
static void sim_comm(struct cgr__coll_rt *cr)
{
	int64_t left = cr->c->p.sim_comm_ns;

	while (left > 0 && !atomic_load_explicit(&cr->c->ctl->stop,
						 memory_order_relaxed)) {
		int64_t ns = left < 20000000 ? left : 20000000;
		struct timespec ts = { 0, (long)ns };
		nanosleep(&ts, NULL);
		left -= ns;
	}
}

/*
 * Runs this member's communicator operation d: on the CPU communicator at
 * once; on NCCL enqueued on cr->s as agreed (the members agreed on the
 * board), its future in the slot's job (the caller completes the job).
 * agreed: this execution's board agreement decided d (the same kind,
 * count, dtype, op and root on every member), so the communicator uses
 * that verdict and does not compare again.  Static shapes without this
 * execution's agreement leave it unset on the CPU communicator: its own
 * comparison is what fails every member when one changed its shape.
 * NCCL never compares (the late verdict does, after the move).
 */
static int coll_call(struct cgr__coll_rt *cr, uint64_t seq,
		     struct cgr__coll_desc *d, bool agreed)
{
	struct cgr__coll_job *job = &cr->jobs[seq & (cr->c->nslots - 1)];

	atomic_store_explicit(&cr->moved,
			      d->count * cgr_dtype_size(d->dtype),
			      memory_order_relaxed);
	sim_comm(cr);
	if (!cr->nccl) {
		d->agreed = agreed;
		d->stop = cr->far ? &cr->c->ctl->stop : NULL;
		return cgr__comm_coll(cr->comm, cr->rank, d, NULL, NULL);
	}
	d->agreed = true;
	return cgr__comm_coll(cr->comm, cr->rank, d, cr->s, &job->f);
}

/* This member's descriptor of the agreed operation (count elements of
 * dt from in to out; NULL where this member has none). */
static void coll_desc(const struct cgr__coll_rt *cr, const void *in, void *out,
		      size_t count, cgr_dtype dt, struct cgr__coll_desc *d)
{
	const bool root = cr->rank == cr->root;

	memset(d, 0, sizeof(*d));
	d->kind = cr->kind;
	d->send = in;
	d->recv = out;
	d->count = count;
	d->dtype = dt;
	d->op = cgr__coll_reduces(cr->kind) ? cr->op : CGR_SUM;
	d->root = cgr__coll_rooted(cr->kind) ? cr->root : 0;
	switch (cr->kind) {
	case CGR_COLL_REDUCE:
	case CGR_COLL_GATHER:
		d->recv = root ? out : NULL;
		break;
	case CGR_COLL_BROADCAST:
		/* A device edge's root keeps no copy: in place. */
		if (root && out == NULL)
			d->recv = (void *)in;
		d->send = root ? in : NULL;
		break;
	case CGR_COLL_SCATTER:
		d->send = root ? in : NULL;
		break;
	default:
		break;
	}
}

/* Writes the header of output port p for execution seq from the verdict
 * (a device port's tensor data is in its device slot). */
static void set_out(const struct cgr__port *p, uint64_t seq,
		    const struct cgr__verdict *v)
{
	struct cgr__slot_hdr *oh = cgr__port_slot(p, seq);

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
	oh->dev_type = p->dmem != NULL ? kDLCUDA : kDLCPU;
	oh->dev_id = p->dmem != NULL ? p->dev : 0;
	oh->ref = (uint64_t)(uintptr_t)cgr__port_data(p, seq);
	for (int i = 0; i < v->out.ndim; i++)
		oh->shape[i] = v->out.shape[i];
}

/* Copies n bytes: on cr's stream in order (NCCL: device memory), or now. */
static int coll_copy(struct cgr__coll_rt *cr, void *dst, const void *src,
		     size_t n)
{
	if (n == 0 || dst == src)
		return 0;
	if (cr->nccl)
		return cgr_stream_memcpy_async(cr->s, dst, src, n);
	memcpy(dst, src, n);
	return 0;
}

/* This member's input j for execution seq (NONE if it has none). */
static void load_input(const struct cgr__coll_rt *cr, uint64_t seq, size_t j,
		       cgr_value *in)
{
	memset(in, 0, sizeof(*in));
	if (cr->in_ports[j] != CGR__NO_PORT)
		cgr__value_load(
			cgr__port_slot(&cr->c->ports[cr->in_ports[j]], seq),
			in);
}

static const void *data_of(const cgr_value *v)
{
	if (v->kind == CGR_VALUE_TENSOR)
		return v->u.tensor.data;
	return v->kind == CGR_VALUE_BYTES ? v->u.bytes.data : NULL;
}

void cgr__coll_describe(struct cgr__coll_rt *cr, uint64_t seq)
{
	for (size_t j = 0; j < cr->k; j++) {
		cgr_value in;
		load_input(cr, seq, j, &in);
		cgr__agree_value(&cr->mine[j], &in,
				 cr->in_ports[j] != CGR__NO_PORT);
		if (cr->static_shape)
			cr->mine[j].flags |= CGR__AGREE_STATIC;
		/* NCCL moves device tensors only: bytes stay on the host. */
		if (cr->nccl && in.kind == CGR_VALUE_BYTES) {
			cr->mine[j].kind = CGR_VALUE_ERROR;
			cr->mine[j].code = CGR_EBADVALUE;
			snprintf(cr->mine[j].msg, sizeof(cr->mine[j].msg),
				 "bytes cannot travel over NCCL (rank %d)",
				 cr->rank);
		}
	}
}

bool cgr__coll_needs_agree(const struct cgr__coll_rt *cr)
{
	/* Lists always agree: their host part is read from the producer's
	 * slot, which only the agreement orders after its writing. */
	return cr->k > 1 || !cr->static_shape || !cr->have_cached ||
	       (cr->edge && cr->cached[cr->root].kind == CGR_VALUE_LIST);
}

/*
 * A bucket: k tensors per member, one fused allreduce, allgather or
 * broadcast.  The inputs are packed back to back, moved in one operation,
 * and unpacked into the k outputs (for allgather, rank q's block of
 * tensor j is at q * total + offset j of the gathered bucket).  On NCCL
 * the packing and unpacking are copies on the collective's stream.
 */

/* Judges each of the k agreed tensors (all: every member's records);
 * *total gets the elements in all.  Returns 0 to go on, 1 when the
 * outputs became error values. */
static int bucket_judge(struct cgr__coll_rt *cr, uint64_t seq,
			const struct cgr__agree *all, size_t *total)
{
	struct cgr__verdict *v = cr->verdicts;
	char msg[700];

	*total = 0;
	for (size_t j = 0; j < cr->k; j++) {
		judge(cr, all + j, cr->k, cr->cap, &v[j]);
		if (v[j].err == 0 && v[j].out.dtype != v[0].out.dtype) {
			v[j].err = -EINVAL;
			snprintf(v[j].msg, sizeof(v[j].msg),
				 "tensors of a bucket must share a dtype: "
				 "tensor 0 is %s, tensor %zu is %s",
				 cgr__dtype_name(v[0].out.dtype), j,
				 cgr__dtype_name(v[j].out.dtype));
		}
		if (v[j].err != 0) {
			snprintf(msg, sizeof(msg), "tensor %zu of %zu: %s", j,
				 cr->k, v[j].msg);
			verdict_fail(cr, seq, &v[j], j, msg);
			return 1;
		}
		*total += v[j].count;
	}
	return 0;
}

/* Unpacks the moved bucket into this member's outputs. */
static int bucket_unpack(struct cgr__coll_rt *cr, uint64_t seq, size_t total,
			 size_t esz)
{
	struct cgr_compiled *c = cr->c;
	const struct cgr__verdict *v = cr->verdicts;
	size_t off = 0;
	int ret = 0;

	for (size_t j = 0; j < cr->k; off += v[j].count, j++) {
		if (cr->out_ports[j] == CGR__NO_PORT)
			continue; /* a device edge's root keeps no copy */
		const struct cgr__port *p = &c->ports[cr->out_ports[j]];
		unsigned char *dst = cgr__port_place(p, seq, v[j].out_bytes);
		size_t bytes = v[j].count * esz;
		if (cr->kind != CGR_COLL_ALLGATHER)
			ret |= coll_copy(cr, dst, cr->bucket_out + off * esz,
					 bytes);
		else
			for (size_t q = 0; q < (size_t)cr->n; q++)
				ret |= coll_copy(cr, dst + q * bytes,
						 cr->bucket_out +
							 (q * total + off) * esz,
						 bytes);
		set_out(p, seq, &v[j]);
	}
	return ret;
}

/* The bucket's data: pack, one operation, unpack. */
static int bucket_move(struct cgr__coll_rt *cr, uint64_t seq)
{
	const struct cgr__verdict *v = cr->verdicts;
	struct cgr__coll_desc d;
	size_t total, esz, off = 0;
	cgr_dtype dt;
	int ret = 0;

	if (bucket_judge(cr, seq, cr->cached, &total) != 0)
		return 0;
	dt = (cgr_dtype)v[0].out.dtype;
	esz = cgr_dtype_size(dt);
	for (size_t j = 0; j < cr->k; j++) {
		cgr_value in;
		load_input(cr, seq, j, &in);
		if (data_of(&in) == NULL)
			break; /* a broadcast's receiver: nothing to pack */
		ret |= coll_copy(cr, cr->bucket_in + off * esz, data_of(&in),
				 v[j].count * esz);
		off += v[j].count;
	}
	coll_desc(cr, cr->bucket_in,
		  cr->kind == CGR_COLL_BROADCAST && cr->rank == cr->root ?
			  cr->bucket_in :
			  cr->bucket_out,
		  total, dt, &d);
	/* A bucket always agrees (cgr__coll_needs_agree). */
	if (ret == 0)
		ret = coll_call(cr, seq, &d, true);
	if (ret == 0)
		ret = bucket_unpack(cr, seq, total, esz);
	if (ret < 0)
		comm_fail(cr, seq, ret);
	return ret;
}

/* A list over a device edge that does not fit its readers' buffers: an
 * error value on every member. */
static void list_too_big(struct cgr__coll_rt *cr, uint64_t seq, uint64_t len)
{
	char msg[400];

	snprintf(msg, sizeof(msg),
		 "list of %llu bytes exceeds the %zu-byte buffer",
		 (unsigned long long)len, cr->cap);
	coll_fail(cr, seq, CGR_ETOOBIG, msg);
}

/*
 * A list over a device edge (a mixed value) on the CPU communicator:
 * every reader lays the list out from the producer's slot, copying the
 * bytes items through host memory, while the tensor items' data moves
 * through the communicator, packed into one broadcast.
 */
static void run_list(struct cgr__coll_rt *cr, uint64_t seq)
{
	struct cgr_compiled *c = cr->c;
	struct cgr__slot_hdr *rh =
		cgr__port_slot(&c->ports[cr->root_port], seq);
	bool root = cr->rank == cr->root;
	struct cgr__slot_hdr *oh = NULL;
	cgr_value rv, ov;
	size_t total = 0, off = 0;
	int ret;

	/* The producer may be another process: its tables relocated. */
	cgr__value_load_view(rh, c->ports[cr->root_port].cap, &rv, cr->view);
	if (rv.kind != CGR_VALUE_LIST) {
		/* Corrupt: still take part (a count nobody else has fails
		 * the broadcast on every member). */
		cgr_broadcast(cr->comm, cr->rank, cr->bucket_out,
			      cr->bucket_out, (size_t)-1 / 2, CGR_UINT8, cr->root,
			      NULL, NULL);
		coll_fail(cr, seq, CGR_ECORRUPT, rv.u.error.msg);
		return;
	}
	for (size_t i = 0; i < rv.u.list.n; i++)
		if (rv.u.list.items[i].kind == CGR_VALUE_TENSOR)
			total += cgr_tensor_nbytes(&rv.u.list.items[i].u.tensor);
	if (total > cr->cap || rh->len > cr->cap) {
		list_too_big(cr, seq, rh->len);
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
	sim_comm(cr);
	ret = cgr_broadcast(cr->comm, cr->rank, root ? cr->bucket_in : NULL,
			    root ? cr->bucket_in : cr->bucket_out, total,
			    CGR_UINT8, cr->root, NULL, NULL);
	if (ret < 0) {
		comm_fail(cr, seq, ret);
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

/* The span [*lo, *hi) of slot base that list v's tensor items cover. */
static void tensor_span(const cgr_value *v, const unsigned char *base,
			size_t *lo, size_t *hi)
{
	*lo = *hi = 0;
	for (size_t i = 0; i < v->u.list.n; i++) {
		const DLTensor *t = &v->u.list.items[i].u.tensor;
		size_t off, b;
		if (v->u.list.items[i].kind != CGR_VALUE_TENSOR ||
		    (b = cgr_tensor_nbytes(t)) == 0)
			continue;
		off = (size_t)((const unsigned char *)t->data - base);
		if (*hi == 0 || off < *lo)
			*lo = off;
		if (off + b > *hi)
			*hi = off + b;
	}
}

/*
 * A list over an NCCL edge: the producer's device port holds the tables
 * and bytes items in its host slot and the tensor items at the same
 * offsets of its device slot (chan/value.c).  Every reader lays the list
 * out from the producer's host slot into its own (bytes through host
 * memory, as one process), and the tensor items move in one in-place
 * broadcast of the span that holds them, device slot to device slot.
 * Every member computes the span from the same slot.
 */
static void run_list_nccl(struct cgr__coll_rt *cr, uint64_t seq)
{
	struct cgr_compiled *c = cr->c;
	const struct cgr__port *rp = &c->ports[cr->root_port], *op = NULL;
	struct cgr__slot_hdr *rh = cgr__port_slot(rp, seq);
	unsigned char *rbase = cgr__port_data(rp, seq), *obase = NULL;
	bool root = cr->rank == cr->root;
	struct cgr__coll_desc d;
	size_t lo, hi;
	cgr_value rv;
	int ret;

	if (!root && cr->out_ports[0] != CGR__NO_PORT) {
		op = &c->ports[cr->out_ports[0]];
		obase = cgr__port_data(op, seq);
	}
	/* Every member judges the same slot (no call, or everybody's).  A
	 * reader always has its output port (compile/lower.c); without one
	 * the communicator's own check would fail every member. */
	if (rh->len > cr->cap) {
		list_too_big(cr, seq, rh->len);
		return;
	}
	cgr__value_load(rh, &rv);
	tensor_span(&rv, rbase, &lo, &hi);
	if (op != NULL)
		cgr__list_store_dev(cgr__port_slot(op, seq), &rv, obase,
				    op->dev);
	if (hi == lo)
		return; /* no tensor data: nobody calls */
	coll_desc(cr, rbase + lo, root ? NULL : obase + lo, hi - lo,
		  CGR_UINT8, &d);
	ret = coll_call(cr, seq, &d, true);
	if (ret < 0)
		comm_fail(cr, seq, ret);
}

/* Static shapes on the CPU communicator: a member whose input is an
 * error value poisoned the operation (CGR_ETASK on every member, once
 * every member posted its operation: every input is in).  The lowest
 * such rank's error value reaches every output.  Whether one was found. */
static bool static_error(struct cgr__coll_rt *cr, uint64_t seq)
{
	for (int r = 0; r < cr->n; r++)
		if (has_input(cr->kind, r, cr->root) &&
		    error_input(cr, seq, r, 0) != NULL) {
			coll_forward(cr, seq, r, 0, CGR_ETASK, "");
			return true;
		}
	return false;
}

void cgr__coll_late_verdict(struct cgr__coll_rt *cr, uint64_t seq,
			    const struct cgr__agree *all)
{
	struct cgr__verdict v;

	if (cgr__agree_static(cr->kind, cr->n, cr->root, cr->cached, all, &v))
		verdict_fail(cr, seq, &v, 0, v.msg);
}

/* A single tensor's data, after the agreement (agreed: this execution
 * agreed; else static shapes agreed before). */
static void single_move(struct cgr__coll_rt *cr, uint64_t seq, bool agreed)
{
	struct cgr_compiled *c = cr->c;
	const struct cgr__port *op = NULL;
	struct cgr__coll_desc d;
	struct cgr__verdict v, cv;
	bool changed = false;
	const void *src;
	void *dst = NULL;
	cgr_value in;
	size_t count;
	int ret;

	/* Static shapes: the first agreement that succeeded holds for
	 * everybody; only this member's own change is visible here. */
	if (!agreed)
		changed = cgr__agree_changed(cr->rank, &cr->cached[cr->rank],
					     cr->mine, &cv);
	judge(cr, cr->cached, 1, cr->cap, &v);
	if (v.err != 0) {
		verdict_fail(cr, seq, &v, 0, v.msg);
		return;
	}
	/* Every member reached this verdict: the shapes to keep. */
	if (agreed)
		cr->have_cached = true;
	count = v.count;
	load_input(cr, seq, 0, &in);
	src = data_of(&in);
	if (changed && cr->nccl && has_input(cr->kind, cr->rank, cr->root))
		src = cr->dscratch; /* the late verdict fails it */
	if (cr->out_ports[0] != CGR__NO_PORT) {
		op = &c->ports[cr->out_ports[0]];
		dst = cgr__port_place(op, seq, v.out_bytes);
	}
	coll_desc(cr, src, dst, count, (cgr_dtype)v.out.dtype, &d);
	if (changed && !cr->nccl && has_input(cr->kind, cr->rank, cr->root)) {
		/* An error value here: the operation fails on every member
		 * (CGR_ETASK), which then find it.  A shape or dtype that
		 * changed: on every member with CGR_EMISMATCH and what
		 * changed (its rank, the shapes), before any data moves. */
		bool err = cr->mine->kind == CGR_VALUE_ERROR;
		d.count = 0;
		d.poison = err ? CGR_ETASK : CGR_EMISMATCH;
		d.poison_msg = err ? "its input is an error value" : cv.msg;
	}
	ret = coll_call(cr, seq, &d, agreed);
	/* An error value anywhere before a change of shape (as across
	 * hosts), whichever rank poisoned first. */
	if ((ret == CGR_ETASK || ret == CGR_EMISMATCH) && !agreed &&
	    !cr->nccl && static_error(cr, seq))
		return;
	if (ret < 0)
		comm_fail(cr, seq, ret);
	else if (op != NULL)
		set_out(op, seq, &v);
}

void cgr__coll_move(struct cgr__coll_rt *cr, uint64_t seq, bool agreed)
{
	if (cr->k > 1) {
		bucket_move(cr, seq);
		return;
	}
	if (agreed && cr->edge && cr->cached[cr->root].kind == CGR_VALUE_LIST) {
		if (cr->nccl)
			run_list_nccl(cr, seq);
		else
			run_list(cr, seq);
		return;
	}
	single_move(cr, seq, agreed);
}

/* ---- members on several hosts -------------------------------------- */

/*
 * A collective whose members are on several hosts has no board and no
 * communicator: every member with an output (a reduce's or gather's root
 * only) read every member's input over its channels (compile/lower.c),
 * so each one describes all the inputs itself, reaches the verdict the
 * board would have given (the same records everywhere: an agreement
 * without an exchange) and computes its own outputs from the inputs.  Reductions fold the members' data in rank order (rank 0
 * op rank 1 op ...), so every member gets the same bits, whatever the
 * hosts.  Static shapes: the first execution that agrees is kept, and a
 * later change fails every member as on NCCL (cgr__agree_static).
 */

/* Rank r's input j for execution seq (NONE where it has none). */
static void spans_load(const struct cgr__coll_rt *cr, uint64_t seq, int r,
		       size_t j, cgr_value *in)
{
	unsigned pi = cr->all_in_ports[(size_t)r * cr->k + j];

	memset(in, 0, sizeof(*in));
	if (pi != CGR__NO_PORT)
		cgr__value_load(cgr__port_slot(&cr->c->ports[pi], seq), in);
}

/* Every member's records of execution seq into cr->late. */
static void spans_describe(struct cgr__coll_rt *cr, uint64_t seq)
{
	for (int r = 0; r < cr->n; r++)
		for (size_t j = 0; j < cr->k; j++) {
			size_t x = (size_t)r * cr->k + j;
			cgr_value in;
			spans_load(cr, seq, r, j, &in);
			cgr__agree_value(&cr->late[x], &in,
					 cr->all_in_ports[x] != CGR__NO_PORT);
			if (cr->static_shape)
				cr->late[x].flags |= CGR__AGREE_STATIC;
		}
}

/* This member's output j from every member's input j (src: rank r's
 * data, NULL where it has none), as verdict v says (v->count elements
 * of a member's block). */
static void compute_from(struct cgr__coll_rt *cr, uint64_t seq, size_t j,
			 const struct cgr__verdict *v,
			 const unsigned char **src)
{
	const cgr_dtype dt = (cgr_dtype)v->out.dtype;
	const size_t blk = v->count * cgr_dtype_size(dt);
	const size_t me = (size_t)cr->rank;
	const int n = cr->n;
	const struct cgr__port *p;
	unsigned char *dst;

	if (cr->out_ports[j] == CGR__NO_PORT)
		return; /* reduce and gather: the root's only */
	p = &cr->c->ports[cr->out_ports[j]];
	dst = cgr__port_place(p, seq, v->out_bytes);
	switch (cr->kind) {
	case CGR_COLL_REDUCESCATTER:
		for (int r = 0; r < n; r++)
			src[r] += me * blk;
		/* fall through */
	case CGR_COLL_ALLREDUCE:
	case CGR_COLL_REDUCE:
		cgr__reduce(dst, (const void *const *)src, n, v->count, dt,
			    cr->op, n);
		break;
	case CGR_COLL_ALLGATHER:
	case CGR_COLL_GATHER:
		for (int r = 0; r < n; r++)
			memcpy(dst + (size_t)r * blk, src[r], blk);
		break;
	case CGR_COLL_BROADCAST:
		memcpy(dst, src[cr->root], blk);
		break;
	case CGR_COLL_SCATTER:
		memcpy(dst, src[cr->root] + me * blk, blk);
		break;
	default: /* CGR_COLL_ALLTOALL */
		for (int r = 0; r < n; r++)
			memcpy(dst + (size_t)r * blk, src[r] + me * blk, blk);
		break;
	}
	set_out(p, seq, v);
}

static void spans_compute(struct cgr__coll_rt *cr, uint64_t seq, size_t j,
			  const struct cgr__verdict *v)
{
	const unsigned char *src[CGR_MAX_RANKS];

	for (int r = 0; r < cr->n; r++) {
		cgr_value in;
		spans_load(cr, seq, r, j, &in);
		src[r] = data_of(&in);
	}
	compute_from(cr, seq, j, v, src);
}

static void spans_run(struct cgr__coll_rt *cr, uint64_t seq)
{
	struct cgr__verdict *v = cr->verdicts, sv;
	size_t total = 0;

	/* A reduce's or gather's other members: nothing to make (their
	 * inputs went to the root; compile/lower.c, spans_reads). */
	if (cgr__coll_out_at_root(cr->kind) && cr->rank != cr->root)
		return;
	spans_describe(cr, seq);
	if (cr->k > 1) {
		if (bucket_judge(cr, seq, cr->late, &total) != 0)
			return;
	} else {
		/* An error value anywhere first (as on one host, where it
		 * poisons the operation), then a change of static shape. */
		judge(cr, cr->late, 1, cr->cap, &v[0]);
		if (v[0].err == 0 && cr->static_shape && cr->have_cached &&
		    cgr__agree_static(cr->kind, cr->n, cr->root, cr->cached,
				      cr->late, &sv)) {
			verdict_fail(cr, seq, &sv, 0, sv.msg);
			return;
		}
		if (v[0].err != 0) {
			verdict_fail(cr, seq, &v[0], 0, v[0].msg);
			return;
		}
		total = v[0].count;
		if (cr->static_shape && !cr->have_cached) {
			memcpy(cr->cached, cr->late,
			       (size_t)cr->n * sizeof(*cr->late));
			cr->have_cached = true;
		}
	}
	atomic_store_explicit(&cr->moved,
			      total * cgr_dtype_size((cgr_dtype)v[0].out.dtype),
			      memory_order_relaxed);
	sim_comm(cr);
	for (size_t j = 0; j < cr->k; j++)
		spans_compute(cr, seq, j, &v[j]);
}

/* ---- on a communicator across hosts -------------------------------- */

/*
 * A collective on a caller's communicator whose ranks are on several
 * hosts (far) has no board: every execution the members exchange their
 * records in an allgather over the communicator itself, so each reaches
 * the verdict the board would have given, then the data moves with the
 * communicator's own algorithms (remote/rcomm.c: one message per rank
 * and host, reduce-scatter and allgather, a leader per host).  With
 * static shapes the records still cross every execution (this
 * execution's go to late, compared with the first that agreed).  A
 * member's error value reaches the others whole in a broadcast from it
 * (far_forward).  Teardown while a member waits in the communicator
 * cancels its operation, which aborts the communicator: its ranks'
 * sequences no longer line up.
 */

/* An operation of CGR_UINT8 count bytes on the communicator's records'
 * (its own; NCCL's: its CPU communicator across the hosts), on stream s
 * (NULL: at once). */
static int far_call(struct cgr__coll_rt *cr, int kind, const void *send,
		    void *recv, size_t count, int root, cgr_stream *s,
		    cgr_future **f)
{
	struct cgr__coll_desc d;

	memset(&d, 0, sizeof(d));
	d.kind = kind;
	d.send = send;
	d.recv = recv;
	d.count = count;
	d.dtype = CGR_UINT8;
	d.op = CGR_SUM;
	d.root = root;
	d.stop = &cr->c->ctl->stop;
	return cgr__comm_coll(cgr__comm_records(cr->comm), cr->rank, &d, s, f);
}

/* Rank `from`'s error value (its input j), on every member alike: a
 * broadcast of its slot's header and inline data, checked, then forwarded
 * whole.  If it holds none (an error only its description shows), or the
 * communicator fails, the collective is the origin. */
static void far_forward(struct cgr__coll_rt *cr, uint64_t seq, int from,
			size_t j, int err, const char *msg)
{
	struct cgr__slot_hdr *eh = cr->far_err;
	int ret;

	if (cr->rank == from) {
		const struct cgr__slot_hdr *mine = error_input(cr, seq, from, j);
		memset(eh, 0, CGR__FAR_ERR);
		if (mine != NULL && mine->len <= CGR__INLINE_BYTES &&
		    !mine->big) {
			memcpy(eh, mine, CGR__SLOT_HDR + mine->len);
			eh->big_off = 0;
		}
	}
	ret = far_call(cr, CGR_COLL_BROADCAST, cr->rank == from ? eh : NULL,
		       eh, CGR__FAR_ERR, from, NULL, NULL);
	if (ret < 0)
		comm_fail(cr, seq, ret);
	else if (eh->kind != CGR_VALUE_ERROR ||
		 cgr__slot_check(eh, CGR__INLINE_BYTES, 0) < 0)
		coll_fail(cr, seq, err, msg);
	else
		forward_from(cr, seq, eh);
}

/* The bytes of this member's input j (0: none, or not data). */
static size_t input_bytes(const cgr_value *in)
{
	if (in->kind == CGR_VALUE_TENSOR)
		return cgr_tensor_nbytes(&in->u.tensor);
	return in->kind == CGR_VALUE_BYTES ? in->u.bytes.len : 0;
}

/* Bytes of one member's part of the exchange: its k records, then
 * (one tensor each: k 1; not on NCCL, whose data is on a device) room
 * for a small input. */
static size_t far_each(const struct cgr__coll_rt *cr)
{
	return cr->k * sizeof(struct cgr__agree) +
	       (cr->k == 1 && !cr->nccl ? CGR__FAR_SMALL : 0);
}

/* The exchange: this member's k records and, if it has one input of at
 * most CGR__FAR_SMALL bytes, that input, to every member; their records
 * into recs (n * k), the rest stays in far_all. */
static int far_exchange(struct cgr__coll_rt *cr, uint64_t seq,
			struct cgr__agree *recs)
{
	size_t rb = cr->k * sizeof(struct cgr__agree);
	size_t each = far_each(cr);
	cgr_value in;
	size_t b;
	int ret;

	memcpy(cr->far_mine, cr->mine, rb);
	load_input(cr, seq, 0, &in);
	b = input_bytes(&in);
	if (cr->k == 1 && b != 0 && b <= CGR__FAR_SMALL)
		memcpy(cr->far_mine + rb, data_of(&in), b);
	ret = far_call(cr, CGR_COLL_ALLGATHER, cr->far_mine, cr->far_all, each,
		       0, NULL, NULL);
	for (int r = 0; ret == 0 && r < cr->n; r++)
		memcpy(&recs[(size_t)r * cr->k], cr->far_all + (size_t)r * each,
		       rb);
	return ret;
}

/* An agreed execution of one input each of at most CGR__FAR_SMALL bytes:
 * every member computes its outputs from what the exchange gathered, as
 * members over values do (the same fold order), without a second
 * exchange. */
static void far_small(struct cgr__coll_rt *cr, uint64_t seq,
		      const struct cgr__verdict *v)
{
	const unsigned char *src[CGR_MAX_RANKS];
	size_t each = far_each(cr);

	for (int r = 0; r < cr->n; r++)
		src[r] = has_input(cr->kind, r, cr->root) ?
				 cr->far_all + (size_t)r * each +
					 sizeof(struct cgr__agree) :
				 NULL;
	atomic_store_explicit(&cr->moved, v->in_bytes, memory_order_relaxed);
	compute_from(cr, seq, 0, v, src);
}

/* This execution on the communicator: the exchange, the verdict, the
 * move (none for small inputs).  -ECANCELED when teardown cut the
 * exchange short. */
static int far_run(struct cgr__coll_rt *cr, uint64_t seq)
{
	bool keep = cr->static_shape && cr->have_cached;
	struct cgr__verdict v, sv;
	int ret;

	cgr__coll_describe(cr, seq);
	ret = far_exchange(cr, seq, keep ? cr->late : cr->cached);
	if (ret == -ECANCELED &&
	    atomic_load_explicit(&cr->c->ctl->stop, memory_order_acquire)) {
		coll_fail(cr, seq, -ECANCELED, "the graph was torn down");
		return -ECANCELED;
	}
	if (ret < 0) {
		comm_fail(cr, seq, ret);
		return 0;
	}
	if (cr->k > 1) {
		cgr__coll_move(cr, seq, true); /* a bucket: no static shapes */
		return 0;
	}
	/* An error value anywhere first (as on one host, where it poisons
	 * the operation), then a change of static shape. */
	judge(cr, keep ? cr->late : cr->cached, 1, cr->cap, &v);
	if (v.err == 0 && keep &&
	    cgr__agree_static(cr->kind, cr->n, cr->root, cr->cached, cr->late,
			      &sv))
		v = sv;
	if (v.err != 0) {
		verdict_fail(cr, seq, &v, 0, v.msg);
		return 0;
	}
	if (v.in_bytes > CGR__FAR_SMALL) {
		cgr__coll_move(cr, seq, true);
		return 0;
	}
	cr->have_cached = true;
	far_small(cr, seq, &v);
	return 0;
}

int cgr__coll_far_post(struct cgr__coll_rt *cr, uint64_t seq, cgr_stream *s,
		       cgr_future **xf)
{
	size_t rb = cr->k * sizeof(struct cgr__agree);
	int ret;

	memcpy(cr->far_mine, cr->mine, rb);
	ret = far_call(cr, CGR_COLL_ALLGATHER, cr->far_mine, cr->far_all, rb,
		       0, s, xf);
	if (ret < 0) {
		*xf = NULL;
		comm_fail(cr, seq, ret);
	}
	return ret;
}

bool cgr__coll_far_verdict(struct cgr__coll_rt *cr, uint64_t seq,
			   cgr_future *xf)
{
	bool keep = cr->static_shape && cr->have_cached;
	struct cgr__agree *recs = keep ? cr->late : cr->cached;
	size_t rb = cr->k * sizeof(struct cgr__agree);
	struct cgr__verdict v, sv;
	int ret = cgr_future_wait(xf, 0);

	if (ret == -ECANCELED &&
	    atomic_load_explicit(&cr->c->ctl->stop, memory_order_acquire)) {
		coll_fail(cr, seq, -ECANCELED, "the graph was torn down");
		return false;
	}
	if (ret < 0) {
		comm_fail(cr, seq, ret);
		return false;
	}
	for (int r = 0; r < cr->n; r++)
		memcpy(&recs[(size_t)r * cr->k], cr->far_all + (size_t)r * rb,
		       rb);
	/* A list's tensors over a device edge travel with its host part,
	 * which is in the producer's host's slot. */
	if (cr->edge && recs[cr->root].kind == CGR_VALUE_LIST) {
		coll_fail(cr, seq, -ENOTSUP, "a list over a device edge does "
			  "not cross hosts");
		return false;
	}
	if (cr->k > 1)
		return true; /* a bucket: judged at the move, as on one host */
	/* Static shapes: a change first (the lowest rank that changed: its
	 * error value, or CGR_EMISMATCH), as NCCL's late verdict on one host
	 * finds it; then the verdict of this execution's records (the move
	 * judges cached again: the same verdict). */
	if (keep && cgr__agree_static(cr->kind, cr->n, cr->root, cr->cached,
				      cr->late, &sv))
		v = sv;
	else
		judge(cr, recs, 1, cr->cap, &v);
	if (v.err != 0) {
		verdict_fail(cr, seq, &v, 0, v.msg);
		return false;
	}
	return true;
}

/* NCCL: the slot's operation, if any: 1 done (its outputs hold error
 * values if it failed), 0 still running.  Never blocks. */
int cgr__coll_device_test(struct cgr__coll_rt *cr, uint64_t seq)
{
	struct cgr__coll_job *job = &cr->jobs[seq & (cr->c->nslots - 1)];
	int ret, q;

	if (job->f == NULL)
		return 1;
	ret = cgr_future_test(job->f);
	if (ret == 0)
		return 0;
	q = ret == 1 && job->ev != NULL ? cgr_event_query(job->ev) : 1;
	if (q == 0)
		return 0;
	if (ret == 1 && q < 0) {
		ret = q;
		/* The stream failed: the device did (failure.c). */
		cgr__prog_device_failed(cr->prog, q, "its NCCL stream");
	}
	cgr_future_release(job->f);
	job->f = NULL;
	if (ret < 0)
		comm_fail(cr, seq, ret);
	return 1;
}

/* After the move: the event after all of the slot's stream work (the
 * NCCL operation, a bucket's unpacking). */
void cgr__coll_device_mark(struct cgr__coll_rt *cr, uint64_t seq)
{
	struct cgr__coll_job *job = &cr->jobs[seq & (cr->c->nslots - 1)];

	if (job->f != NULL && job->ev != NULL &&
	    cgr_event_record(job->ev, cr->s) < 0) {
		cgr_future_release(job->f);
		job->f = NULL;
		comm_fail(cr, seq, CGR_EDEVICE);
	}
}

/* The CPU communicator's collectives: agreement, then the move, on the
 * caller's thread (NCCL's go through run/launch.c).  Teardown cuts the
 * agreement short: the outputs become error values (no reader computes
 * on stale data) and -ECANCELED is returned.  The members' data meet in
 * shared memory, also of worker processes: publication before, arrival
 * after (prog.h: TSan builds only). */
int cgr__coll_run(struct cgr__coll_rt *cr, uint64_t seq, struct cgr__reactor *r)
{
	bool agreed = false;
	int ret = 0;

	cgr__c_release(cr->c);
	if (cr->far) {
		ret = far_run(cr, seq);
		goto out;
	}
	if (cr->spans) {
		spans_run(cr, seq);
		goto out;
	}
	cgr__coll_describe(cr, seq);
	if (cgr__coll_needs_agree(cr)) {
		if (agree(cr, seq, r) < 0) {
			coll_fail(cr, seq, -ECANCELED, "the graph was torn down");
			ret = -ECANCELED;
			goto out;
		}
		agreed = true;
	}
	cgr__coll_move(cr, seq, agreed);
out:
	cgr__c_acquire(cr->c);
	return ret;
}
