/*
 * tests/t_coll.h: what a collective's outputs must hold, for the graph
 * tests that feed every member the same kind of input: member r's element
 * i of execution x is t_coll_elem(x, r, i), per elements each.
 */
#ifndef CGR_TEST_COLL_H
#define CGR_TEST_COLL_H

#include <stdint.h>

#include <cgr.h>

static inline int64_t t_coll_elem(uint64_t x, int rank, int i)
{
	return (int64_t)x * 7 + rank * 1000 + i;
}

/* Element e of output o (rank o's, or the root's) of a collective of kind
 * over n ranks, each contributing per elements, for execution x. */
static inline int64_t t_coll_expect(int kind, int n, int root, int per,
				    uint64_t x, int o, int e)
{
	int64_t s = 0;

	switch (kind) {
	case CGR_COLL_ALLREDUCE:
	case CGR_COLL_REDUCE:
		for (int r = 0; r < n; r++)
			s += t_coll_elem(x, r, e);
		return s;
	case CGR_COLL_ALLGATHER:
	case CGR_COLL_GATHER:
		return t_coll_elem(x, e / per, e % per);
	case CGR_COLL_REDUCESCATTER:
		for (int r = 0; r < n; r++)
			s += t_coll_elem(x, r, o * (per / n) + e);
		return s;
	case CGR_COLL_BROADCAST:
		return t_coll_elem(x, root, e);
	case CGR_COLL_SCATTER:
		return t_coll_elem(x, root, o * (per / n) + e);
	case CGR_COLL_ALLTOALL:
		/* block j of rank o's output came from rank j's block o */
		return t_coll_elem(x, e / (per / n),
				   o * (per / n) + e % (per / n));
	}
	return 0;
}

#endif
