/*
 * comm/kinds.h: the one vocabulary of collectives and element types that
 * every layer uses: the collective kinds (cgr.h's enum cgr_coll_kind, with
 * send and receive as internal extensions), what each kind does with its
 * root, the dtype table (sizes, names, DLPack codes) and reduction names.
 */
#ifndef CGR_COMM_KINDS_H
#define CGR_COMM_KINDS_H

#include <stdbool.h>
#include <stdint.h>

#include "cgr.h"

/* Point to point, as operation kinds beside cgr.h's collectives. */
#define CGR__COLL_SEND (CGR_COLL_ALLTOALL + 1)
#define CGR__COLL_RECV (CGR_COLL_ALLTOALL + 2)
#define CGR__COLL_KIND_END (CGR_COLL_ALLTOALL + 3)

/* A collective (not send or receive) kind of cgr.h. */
static inline bool cgr__coll_valid(int kind)
{
	return kind >= CGR_COLL_ALLREDUCE && kind <= CGR_COLL_ALLTOALL;
}

/* Takes a root: reduce, broadcast, gather, scatter. */
static inline bool cgr__coll_rooted(int kind)
{
	return kind == CGR_COLL_REDUCE || kind == CGR_COLL_BROADCAST ||
	       kind == CGR_COLL_GATHER || kind == CGR_COLL_SCATTER;
}

/* Reduces with an op: allreduce, reducescatter, reduce. */
static inline bool cgr__coll_reduces(int kind)
{
	return kind == CGR_COLL_ALLREDUCE || kind == CGR_COLL_REDUCESCATTER ||
	       kind == CGR_COLL_REDUCE;
}

/* Its input exists only at the root: broadcast, scatter. */
static inline bool cgr__coll_in_at_root(int kind)
{
	return kind == CGR_COLL_BROADCAST || kind == CGR_COLL_SCATTER;
}

/* Its output exists only at the root: reduce, gather. */
static inline bool cgr__coll_out_at_root(int kind)
{
	return kind == CGR_COLL_REDUCE || kind == CGR_COLL_GATHER;
}

/* "allreduce", ..., "send", "recv"; "?op" for anything else. */
const char *cgr__coll_kind_name(int kind);
/* "int8", ..., "float64"; "?dtype" for anything else. */
const char *cgr__dtype_name(int dt);
/* "sum", ..., "avg"; "?op" for anything else. */
const char *cgr__redop_name(int op);

/* The cgr_dtype of DLPack's (code, bits, lanes), or -1. */
int cgr__dtype_of_dl(uint8_t code, uint8_t bits, uint16_t lanes);
/* DLPack's code and bits of a valid cgr_dtype. */
void cgr__dtype_to_dl(int dt, uint8_t *code, uint8_t *bits);

#endif
