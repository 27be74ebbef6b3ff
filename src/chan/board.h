/*
 * chan/board.h: an agreement board: the members of one collective post a
 * fixed-size record each per execution (a description of their input) and
 * every member reads all of them once everybody has posted.  The records
 * are the agreement's (struct cgr__agree, comm/agree.h): the board is
 * only their transport between a collective node's members; run/coll.c
 * builds them and judges them with comm/agree.h, so that every member
 * reaches the same verdict from the same records before any data moves.
 *
 * Layout: a header, each member's doorbell, a "done" line per member, then
 * nslots rows of n * k records (k per member).  Row seq % nslots is reused
 * by execution seq + nslots only after every member copied the records of
 * execution seq (its done line passed seq).  Records carry the execution's
 * number + 1 as their publication word.
 *
 * Threads: member rank posts from its own thread (or stream executor), one
 * post per execution in execution order.
 */
#ifndef CGR_CHAN_BOARD_H
#define CGR_CHAN_BOARD_H

#include <stdint.h>

#include "base/base.h"
#include "base/futex.h"
#include "comm/agree.h"
#include "reactor/reactor.h"

struct cgr__board;

/* Bytes of a board for n members posting k records each, nslots
 * executions in flight (a power of two). */
size_t cgr__board_size(size_t n, size_t k, uint32_t nslots);

/* Lays the board out in b (cgr__board_size bytes, 64-byte aligned);
 * bells[r] is the doorbell member r waits on. */
/* Whether board b (laid out by another process) has this geometry. */
bool cgr__board_is(const struct cgr__board *b, size_t n, size_t k,
		   uint32_t nslots);
void cgr__board_init(struct cgr__board *b, size_t n, size_t k, uint32_t nslots,
		     struct cgr__bell *const *bells);

/*
 * Member rank posts its k records `mine` for execution seq (only the
 * fields after seq are read), waits until every member posted, and copies
 * all n * k records (member-major) into `all`.  Waits on reactor r (NULL:
 * futex) with rank's doorbell, mode and spin_ns as cgr__reactor_wait.
 * Returns 0 or -ECANCELED once *cancel is set.  A member that returned 0
 * knows every member started this execution's exchange.
 */
int cgr__board_exchange(struct cgr__board *b, int rank, uint64_t seq,
			const struct cgr__agree *mine, struct cgr__agree *all,
			struct cgr__reactor *r, const _Atomic uint32_t *cancel,
			int mode, int64_t spin_ns);

/* The same in two steps that never wait (for a reactor that polls):
 * post returns -EAGAIN while the row of seq is still being read for
 * seq - nslots; collect returns -EAGAIN until every member posted. */
int cgr__board_try_post(struct cgr__board *b, int rank, uint64_t seq,
			const struct cgr__agree *mine);
int cgr__board_try_collect(struct cgr__board *b, int rank, uint64_t seq,
			   struct cgr__agree *all);

#endif
