/*
 * comm/agree.h: the agreement of collectives, the one protocol every
 * path uses before data moves: the graph's collective nodes (run/coll.c,
 * over a board in shared memory, chan/board.h), the CPU communicator
 * (comm/cpu_algo.c, over its shared segment) and the NCCL communicator
 * (comm/nccl_ops.c, over CPU communicators).  Each transport only exchanges
 * records; what a rank contributes (struct cgr__agree, built by
 * cgr__agree_op or cgr__agree_value) and the verdict every rank reaches
 * from everybody's records (cgr__agree_ops, cgr__agree_p2p,
 * cgr__agree_inputs, cgr__agree_static) live here, with their messages,
 * so which difference is which error, with which text, is written once.
 *
 * Every verdict function is pure: the same records give the same verdict
 * on every rank, which is what lets each rank decide on its own.
 *
 * Two kinds of records share one layout:
 *  - an operation (a communicator's call): coll, dtype, count, op, root,
 *    code (a poison: this rank has no valid data) and msg;
 *  - an input (a collective node's, per member and execution): kind (the
 *    value kind), dtype, shape, code and msg (an error value), flags.
 *
 * A latency path (the CPU communicator's lines) compares a compact key instead
 * (struct cgr__agree_key): equal keys mean the operation agrees; on any
 * difference the ranks exchange full records and cgr__agree_ops says why.
 */
#ifndef CGR_COMM_AGREE_H
#define CGR_COMM_AGREE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "comm/comm.h"

/* One rank's record for one operation or input.  seq is the transport's
 * publication word (a board posts execution + 1 there); the verdict
 * functions never read it. */
#define CGR__AGREE_SIZE 256
/* flags: the input has a static shape; the operation was agreed already
 * (the graph's collective nodes agree on their board and hand the
 * communicator the result); from CGR__AGREE_PATH up, a transport's own. */
#define CGR__AGREE_STATIC 1u
#define CGR__AGREE_AGREED 2u
#define CGR__AGREE_PATH 16u
struct cgr__agree {
	_Atomic uint64_t seq;
	int32_t coll;  /* operation: enum cgr_coll_kind, CGR__COLL_SEND/RECV */
	int32_t kind;  /* input: value kind; CGR_VALUE_NONE: no input here */
	int32_t code;  /* an error value's code, or the poison; 0: none */
	int32_t dtype; /* cgr_dtype, -1 if none */
	int32_t op;    /* operation: reductions only, else 0 */
	int32_t root;  /* operation: rooted collectives and the peer of
			  sends and receives, else 0 */
	int32_t ndim;  /* input */
	uint32_t flags;
	uint64_t count; /* operation: its count */
	int64_t shape[CGR_MAX_NDIM];
	char msg[CGR__AGREE_SIZE - 48 - 8 * CGR_MAX_NDIM];
};
_Static_assert(sizeof(struct cgr__agree) == CGR__AGREE_SIZE,
	       "agreement record size");

/*
 * The verdict of one agreement.  err 0: agreed.  from: the rank whose
 * error value (input) decided it, or -1 (the error arises with this
 * verdict).  For inputs that agree: out, the output's description, count,
 * the elements of the communicator call, and the bytes in and out.
 */
struct cgr__verdict {
	int err;
	int from;
	char msg[640];
	struct cgr__agree out;
	size_t count;
	size_t in_bytes, out_bytes;
};

/* ---- operations (communicators) ------------------------------------ */

/* Operation d's record: op and root only where they are compared (root:
 * the peer of sends and receives), CGR__AGREE_AGREED if d->agreed, and the
 * poison's message cut to fit. */
void cgr__agree_op(struct cgr__agree *a, const struct cgr__coll_desc *d);

/*
 * The verdict of collective #k over every rank's record (n records, rank
 * j's at byte j * stride from all): 0; the poison of the lowest poisoned rank
 * ("allreduce #3: rank 2 failed before the operation (CGR_ETASK): its
 * message"); or CGR_EMISMATCH when kind, count, dtype, op (reductions) or root
 * (rooted collectives) differ, in that order, naming rank 0's value and every
 * rank that differs ("allreduce #3: rank 0 count 100, rank 2 count 99").
 * When every record says CGR__AGREE_AGREED (the ranks agreed on the
 * operation already: the graph's collective nodes) the result is used, not
 * recomputed: only a poison that arose since (a device failure, a buffer
 * the peers cannot reach) is looked for.  The message goes to msg (len
 * bytes) only when the verdict fails.
 */
int cgr__agree_ops(const void *all, size_t stride, int n, uint64_t k, char *msg,
		   size_t len);

/*
 * The verdict of a send or receive of rank r from its own record and its
 * peer's (both made by cgr__agree_op; mine->root is the peer).  what
 * names the operation in the message ("send #3 to rank 1", "recv with
 * rank 0").  0; the sender's poison, else the receiver's (this rank's
 * own: "what: its message"; the peer's: "what: rank 1 failed before the
 * operation (CGR_ETASK): its message"); or CGR_EMISMATCH on a different
 * count or dtype ("rank 0 sends 10 int32, rank 1 receives 12 int32").
 * The sender and the receiver reach the same code.
 */
int cgr__agree_p2p(const struct cgr__agree *mine,
		   const struct cgr__agree *theirs, int r, const char *what,
		   char *msg, size_t len);

/* The compact form of an operation's record for a latency path: equal
 * keys mean agreement (op and root are 0 where they are not compared).
 * flags: CGR__AGREE_AGREED from the descriptor, the path's own from
 * CGR__AGREE_PATH up (e.g. "this rank takes the full path"). */
struct cgr__agree_key {
	uint64_t count;
	uint8_t coll, dtype, op, flags;
	int32_t root;
};

static inline void cgr__agree_key_of(struct cgr__agree_key *key,
				     const struct cgr__coll_desc *d,
				     uint8_t flags)
{
	key->count = d->count;
	key->coll = (uint8_t)d->kind;
	key->dtype = (uint8_t)d->dtype;
	key->op = cgr__coll_reduces(d->kind) ? (uint8_t)d->op : 0;
	key->root = cgr__coll_rooted(d->kind) ? d->root : 0;
	key->flags = flags | (d->agreed ? CGR__AGREE_AGREED : 0);
}

/* Whether key b agrees with a.  Two keys of operations agreed already
 * compare their flags only (the agreement's result is used); a key that
 * is and one that is not differ in their flags.  So "every rank's key
 * equals mine" comes out the same on every rank. */
static inline bool cgr__agree_key_eq(const struct cgr__agree_key *a,
				     const struct cgr__agree_key *b)
{
	if (a->flags & b->flags & CGR__AGREE_AGREED)
		return a->flags == b->flags;
	return a->count == b->count && a->coll == b->coll &&
	       a->dtype == b->dtype && a->op == b->op && a->root == b->root &&
	       a->flags == b->flags;
}

/* ---- inputs (collective nodes) ------------------------------------- */

/* Input v's record (has: this member has an input at all). */
void cgr__agree_value(struct cgr__agree *a, const cgr_value *v, bool has);

/* Whether two input records describe the same kind, dtype and shape. */
bool cgr__agree_same_shape(const struct cgr__agree *a,
			   const struct cgr__agree *b);

/* Input record a as "[2,3] float32", "bytes[8] uint8", "nothing". */
int cgr__agree_fmt_shape(char *buf, size_t len, const struct cgr__agree *a);

/* Whether rank has an input in collective kind rooted at root. */
static inline bool cgr__agree_has_input(int kind, int rank, int root)
{
	return !cgr__coll_in_at_root(kind) || rank == root;
}

/*
 * The verdict of collective kind (n members, root) over every member's
 * input record (member j's at byte j * stride from all): an error value at some
 * member (the lowest such rank's: from, its code, "rank 1 contributed an error
 * value: ..."), a member without a tensor of a supported dtype
 * (CGR_EBADVALUE), a dtype or shape mismatch (CGR_EMISMATCH, "shape
 * mismatch: rank 0 has [7,3] int64, rank 2 has [6,3] int64"), a first
 * dimension that does not split among the members (-EINVAL), or an output
 * larger than cap bytes (CGR_ETOOBIG); else the output's description and
 * sizes.
 */
void cgr__agree_inputs(int kind, int n, int root, const void *all,
		       size_t stride, size_t cap, struct cgr__verdict *v);

/*
 * Static shapes: rank's input `now` against the agreed `was`.  Whether it
 * changed (an error value counts), with the verdict in v: the error
 * value's code (from: rank) or CGR_EMISMATCH ("rank 2 changed its static
 * shape from [7,3] int64 to [8,3] int64").
 */
bool cgr__agree_changed(int rank, const struct cgr__agree *was,
			const struct cgr__agree *now, struct cgr__verdict *v);

/* Static shapes over every member's records of one execution (all: n,
 * agreed: n, the first agreement): the lowest rank with an input that
 * changed decides (v as cgr__agree_changed).  Whether one did. */
bool cgr__agree_static(int kind, int n, int root,
		       const struct cgr__agree *agreed,
		       const struct cgr__agree *all, struct cgr__verdict *v);

#endif
