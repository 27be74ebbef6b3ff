/*
 * comm/agree.c: the agreement of collectives (see agree.h): building a
 * rank's record and the verdicts over everybody's records, with their
 * messages.  Nothing here waits or touches shared memory: the transports
 * (chan/board.c, the CPU communicator's segment, nccl_ops.c's CPU communicators) hand in the
 * records they exchanged.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "comm/agree.h"

/* ---- operations ---------------------------------------------------- */

void cgr__agree_op(struct cgr__agree *a, const struct cgr__coll_desc *d)
{
	a->coll = d->kind;
	a->kind = 0;
	a->code = d->poison;
	a->dtype = (int32_t)d->dtype;
	a->op = cgr__coll_reduces(d->kind) ? (int32_t)d->op : 0;
	a->root = cgr__coll_rooted(d->kind) || d->kind == CGR__COLL_SEND ||
			  d->kind == CGR__COLL_RECV
		      ? d->root
		      : 0;
	a->ndim = 0;
	a->flags = d->agreed ? CGR__AGREE_AGREED : 0;
	a->count = d->count;
	snprintf(a->msg, sizeof(a->msg), "%s",
		 d->poison && d->poison_msg ? d->poison_msg : "");
}

/* The field of a record that an operation's verdict compares, as text. */
enum field { F_COUNT, F_DTYPE, F_OP, F_ROOT };

static const char *const field_name[] = {"count", "dtype", "op", "root"};

static int64_t field_of(const struct cgr__agree *a, enum field f)
{
	switch (f) {
	case F_COUNT:
		return (int64_t)a->count;
	case F_DTYPE:
		return a->dtype;
	case F_OP:
		return a->op;
	default:
		return a->root;
	}
}

static const char *field_fmt(const struct cgr__agree *a, enum field f, char *b,
			     size_t l)
{
	switch (f) {
	case F_COUNT:
		snprintf(b, l, "%llu", (unsigned long long)a->count);
		return b;
	case F_DTYPE:
		return cgr__dtype_name(a->dtype);
	case F_OP:
		return cgr__redop_name(a->op);
	default:
		snprintf(b, l, "%d", a->root);
		return b;
	}
}

#define D(j)                                                                   \
	((const struct cgr__agree *)((const unsigned char *)all +              \
				     (size_t)(j)*stride))

/* If field f differs among the n records: the mismatch's message
 * ("allreduce #3: rank 0 count 100, rank 2 count 99", every rank that
 * differs from rank 0) and true. */
static bool differs(const void *all, size_t stride, int n, uint64_t k,
		    enum field f, char *msg, size_t len)
{
	const char *fn = field_name[f];
	char v[32];
	size_t o;
	int j;

	for (j = 1; j < n; j++)
		if (field_of(D(j), f) != field_of(D(0), f))
			break;
	if (j == n)
		return false;
	o = (size_t)snprintf(
	    msg, len, "%s #%llu: rank 0 %s %s", cgr__coll_kind_name(D(0)->coll),
	    (unsigned long long)k, fn, field_fmt(D(0), f, v, sizeof(v)));
	for (; j < n && o + 32 < len; j++)
		if (field_of(D(j), f) != field_of(D(0), f))
			o += (size_t)snprintf(msg + o, len - o,
					      ", rank %d %s %s", j, fn,
					      field_fmt(D(j), f, v, sizeof(v)));
	return true;
}

int cgr__agree_ops(const void *all, size_t stride, int n, uint64_t k, char *msg,
		   size_t len)
{
	uint32_t agreed = CGR__AGREE_AGREED;
	size_t o;
	int j;

	for (j = 0; j < n; j++) {
		agreed &= D(j)->flags;
		if (D(j)->code != 0) {
			snprintf(msg, len,
				 "%s #%llu: rank %d failed before the "
				 "operation (%s)%s%s",
				 cgr__coll_kind_name(D(j)->coll),
				 (unsigned long long)k, j,
				 cgr_err_name(D(j)->code),
				 D(j)->msg[0] ? ": " : "", D(j)->msg);
			return D(j)->code;
		}
	}
	if (agreed)
		return 0;
	for (j = 1; j < n; j++)
		if (D(j)->coll != D(0)->coll)
			break;
	if (j < n) {
		o = (size_t)snprintf(msg, len, "collective #%llu: rank 0 %s",
				     (unsigned long long)k,
				     cgr__coll_kind_name(D(0)->coll));
		for (; j < n && o + 32 < len; j++)
			if (D(j)->coll != D(0)->coll)
				o += (size_t)snprintf(
				    msg + o, len - o, ", rank %d %s", j,
				    cgr__coll_kind_name(D(j)->coll));
		return CGR_EMISMATCH;
	}
	if (differs(all, stride, n, k, F_COUNT, msg, len) ||
	    differs(all, stride, n, k, F_DTYPE, msg, len) ||
	    (cgr__coll_reduces(D(0)->coll) &&
	     differs(all, stride, n, k, F_OP, msg, len)) ||
	    (cgr__coll_rooted(D(0)->coll) &&
	     differs(all, stride, n, k, F_ROOT, msg, len)))
		return CGR_EMISMATCH;
	return 0;
}

#undef D

int cgr__agree_p2p(const struct cgr__agree *mine,
		   const struct cgr__agree *theirs, int r, const char *what,
		   char *msg, size_t len)
{
	bool snd = mine->coll == CGR__COLL_SEND;
	const struct cgr__agree *s = snd ? mine : theirs,
				*d = snd ? theirs : mine;
	int peer = mine->root, sr = snd ? r : peer, dr = snd ? peer : r;

	/* The sender's poison first, then the receiver's: both ends reach
	 * the same code. */
	for (int i = 0; i < 2; i++) {
		const struct cgr__agree *a = i == 0 ? s : d;
		if (a->code == 0)
			continue;
		if (a == mine)
			snprintf(msg, len, "%s: %s", what, mine->msg);
		else
			snprintf(msg, len,
				 "%s: rank %d failed before the operation "
				 "(%s)%s%s",
				 what, peer, cgr_err_name(a->code),
				 a->msg[0] ? ": " : "", a->msg);
		return a->code;
	}
	if (s->count == d->count && s->dtype == d->dtype)
		return 0;
	snprintf(msg, len,
		 "%s: rank %d sends %llu %s, rank %d receives %llu %s", what,
		 sr, (unsigned long long)s->count, cgr__dtype_name(s->dtype),
		 dr, (unsigned long long)d->count, cgr__dtype_name(d->dtype));
	return CGR_EMISMATCH;
}

/* ---- inputs -------------------------------------------------------- */

void cgr__agree_value(struct cgr__agree *a, const cgr_value *v, bool has)
{
	a->coll = -1;
	a->kind = has ? v->kind : CGR_VALUE_NONE;
	a->code = 0;
	a->dtype = -1;
	a->op = 0;
	a->root = 0;
	a->ndim = 0;
	a->flags = 0;
	a->count = 0;
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

bool cgr__agree_same_shape(const struct cgr__agree *a,
			   const struct cgr__agree *b)
{
	if (a->kind != b->kind || a->dtype != b->dtype || a->ndim != b->ndim)
		return false;
	for (int i = 0; i < a->ndim; i++)
		if (a->shape[i] != b->shape[i])
			return false;
	return true;
}

int cgr__agree_fmt_shape(char *buf, size_t len, const struct cgr__agree *a)
{
	size_t off = 0;

	if (a->kind == CGR_VALUE_NONE)
		return snprintf(buf, len, "nothing");
	off += (size_t)snprintf(buf, len, "%s[",
				a->kind == CGR_VALUE_BYTES ? "bytes" : "");
	for (int i = 0; i < a->ndim && off < len; i++)
		off += (size_t)snprintf(buf + off, len - off, "%s%lld",
					i ? "," : "", (long long)a->shape[i]);
	if (off < len)
		off += (size_t)snprintf(buf + off, len - off, "] %s",
					cgr__dtype_name(a->dtype));
	return (int)off;
}

#define D(r)                                                                   \
	(*(const struct cgr__agree *)((const unsigned char *)all +             \
				      (size_t)(r)*stride))

/* An error value at some member (the lowest rank's: v->from), a member
 * without a tensor, or a mismatch (v->err set), else the reference
 * record. */
static const struct cgr__agree *judge_inputs(int kind, int n, int root,
					     const void *all, size_t stride,
					     struct cgr__verdict *v)
{
	const struct cgr__agree *ref = NULL;
	char sa[120], sb[120];
	int r0 = -1;

	for (int r = 0; r < n; r++)
		if (D(r).kind == CGR_VALUE_ERROR) {
			v->err = D(r).code ? D(r).code : CGR_ETASK;
			v->from = r;
			snprintf(v->msg, sizeof(v->msg),
				 "rank %d contributed an error value: %s", r,
				 D(r).msg);
			return NULL;
		}
	for (int r = 0; r < n; r++) {
		if (!cgr__agree_has_input(kind, r, root))
			continue;
		if ((D(r).kind != CGR_VALUE_BYTES &&
		     D(r).kind != CGR_VALUE_TENSOR) ||
		    D(r).dtype < 0) {
			v->err = CGR_EBADVALUE;
			snprintf(v->msg, sizeof(v->msg),
				 "rank %d has no tensor of a supported dtype "
				 "(value kind %d)",
				 r, D(r).kind);
			return NULL;
		}
		if (ref == NULL) {
			ref = &D(r);
			r0 = r;
			continue;
		}
		if (!cgr__agree_same_shape(ref, &D(r))) {
			cgr__agree_fmt_shape(sa, sizeof(sa), ref);
			cgr__agree_fmt_shape(sb, sizeof(sb), &D(r));
			v->err = CGR_EMISMATCH;
			snprintf(v->msg, sizeof(v->msg),
				 "%s mismatch: rank %d has %s, rank %d has %s",
				 ref->dtype != D(r).dtype ? "dtype" : "shape",
				 r0, sa, r, sb);
			return NULL;
		}
	}
	return ref;
}

#undef D

/* The output's shape, the count of the communicator call and the bytes,
 * from the agreed input ref (v->err set if it cannot be). */
static void judge_output(int kind, int n, const struct cgr__agree *ref,
			 size_t cap, struct cgr__verdict *v)
{
	size_t nelem = 1;

	v->out = *ref;
	for (int i = 0; i < ref->ndim; i++)
		nelem *= (size_t)ref->shape[i];
	v->in_bytes = nelem * cgr_dtype_size((cgr_dtype)ref->dtype);
	v->count = nelem;
	v->out_bytes = v->in_bytes;
	if (kind == CGR_COLL_ALLGATHER || kind == CGR_COLL_GATHER) {
		if (v->out.ndim == 0) {
			v->out.ndim = 1;
			v->out.shape[0] = 1;
		}
		v->out.shape[0] *= n;
		v->out_bytes = v->in_bytes * (size_t)n;
	} else if (kind == CGR_COLL_REDUCESCATTER || kind == CGR_COLL_SCATTER ||
		   kind == CGR_COLL_ALLTOALL) {
		if (ref->ndim == 0 || ref->shape[0] % n != 0) {
			v->err = -EINVAL;
			snprintf(v->msg, sizeof(v->msg),
				 "dimension 0 (%lld) does not divide by %d "
				 "ranks",
				 ref->ndim ? (long long)ref->shape[0] : 0LL, n);
			return;
		}
		v->count = nelem / (size_t)n;
		if (kind != CGR_COLL_ALLTOALL) {
			v->out.shape[0] /= n;
			v->out_bytes = v->in_bytes / (size_t)n;
		}
	}
	if (v->out_bytes > cap) {
		v->err = CGR_ETOOBIG;
		snprintf(v->msg, sizeof(v->msg),
			 "result of %zu bytes exceeds the %zu-byte output "
			 "buffer (set max_out_bytes)",
			 v->out_bytes, cap);
	}
}

void cgr__agree_inputs(int kind, int n, int root, const void *all,
		       size_t stride, size_t cap, struct cgr__verdict *v)
{
	const struct cgr__agree *ref;

	v->err = 0;
	v->from = -1;
	v->msg[0] = 0;
	v->count = v->in_bytes = v->out_bytes = 0;
	ref = judge_inputs(kind, n, root, all, stride, v);
	if (ref != NULL)
		judge_output(kind, n, ref, cap, v);
}

bool cgr__agree_changed(int rank, const struct cgr__agree *was,
			const struct cgr__agree *now, struct cgr__verdict *v)
{
	char sa[120], sb[120];

	v->from = -1;
	if (now->kind == CGR_VALUE_ERROR) {
		v->err = now->code ? now->code : CGR_ETASK;
		v->from = rank;
		snprintf(v->msg, sizeof(v->msg),
			 "rank %d contributed an error value: %s", rank,
			 now->msg);
		return true;
	}
	if (cgr__agree_same_shape(was, now)) {
		v->err = 0;
		return false;
	}
	cgr__agree_fmt_shape(sa, sizeof(sa), was);
	cgr__agree_fmt_shape(sb, sizeof(sb), now);
	v->err = CGR_EMISMATCH;
	snprintf(v->msg, sizeof(v->msg),
		 "rank %d changed its static shape from %s to %s", rank, sa,
		 sb);
	return true;
}

bool cgr__agree_static(int kind, int n, int root,
		       const struct cgr__agree *agreed,
		       const struct cgr__agree *all, struct cgr__verdict *v)
{
	for (int r = 0; r < n; r++)
		if (cgr__agree_has_input(kind, r, root) &&
		    cgr__agree_changed(r, &agreed[r], &all[r], v))
			return true;
	v->err = 0;
	v->from = -1;
	return false;
}
