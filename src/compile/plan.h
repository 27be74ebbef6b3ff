/*
 * compile/plan.h: the compiled plan, the one form of a compiled graph's
 * programs that leaves the compiler.  Compile writes it once, after its
 * passes, as one contiguous byte image (in the graph's shared segment
 * when it has one); every runner builds its runtime programs from it
 * (cgr__prog_load, compile/plan.c): the driver's thread workers, each
 * worker process (from the driver's bytes in the segment), and whatever
 * will receive the same bytes over a network.
 *
 * The image is position independent and self-contained: fixed-width
 * integers, offsets from its start and indices only, never a pointer.
 * A task's function and argument are found through its graph task id in
 * the runner's own copy of the graph.  The header carries a magic, a
 * version, the image's size and a checksum (64-bit FNV-1a over every
 * byte after the checksum field); cgr__plan_check refuses an image whose
 * header, checksum or any count, offset or index is wrong, saying which.
 * Nothing is written after the image is made.
 *
 * Layout: the header, then the tables at the offsets it names (each
 * 8-byte aligned): programs, operations, tasks, collectives (each
 * program's a contiguous run of the three), a pool of u32 lists (ports,
 * channels) and a string table (names, NUL-terminated).
 */
#ifndef CGR_COMPILE_PLAN_H
#define CGR_COMPILE_PLAN_H

#include <stddef.h>
#include <stdint.h>

#define CGR__PLAN_MAGIC 0x4e414c50726763ull /* "cgrPLAN" */
#define CGR__PLAN_VERSION 1u
#define CGR__PLAN_NONE 0xffffffffu /* no index (a u32 field) */

/* The header; the checksum covers every byte after its own field. */
struct cgr__plan_hdr {
	uint64_t magic;
	uint64_t checksum;
	uint32_t version;
	uint32_t hdr_bytes; /* sizeof(struct cgr__plan_hdr) */
	uint64_t size;	    /* the whole image */
	/* The layout the programs refer to: the graph's tasks (ids below
	 * ntasks; collectives' boards go by them), ports, channels, buffer
	 * slots. */
	uint32_t ntasks, nports, nchans, nslots;
	/* Tables: offset from the image's start and count. */
	uint32_t progs_off, nprogs;
	uint32_t ops_off, nops;
	uint32_t tasks_off, ntcs;
	uint32_t colls_off, ncolls;
	uint32_t pool_off, npool; /* u32 entries */
	uint32_t str_off, nstr;	  /* bytes */
};

#define CGR__PLAN_GATE 1u /* program: waits for the driver's admission */

/* One worker's program: its runs of the op, task and collective tables. */
struct cgr__plan_prog {
	uint32_t worker; /* the worker's index in its context */
	uint32_t flags;	 /* CGR__PLAN_GATE */
	uint32_t op0, nops;
	uint32_t tc0, ntcs;
	uint32_t coll0, ncolls;
};

#define CGR__PLAN_ORDER 1u /* WAIT: keeps collective order */
#define CGR__PLAN_PREV 2u  /* WAIT: the previous execution's */

/* An operation (enum cgr__op_kind); indices are the program's own. */
struct cgr__plan_op {
	uint32_t kind;
	uint32_t flags; /* CGR__PLAN_ORDER, CGR__PLAN_PREV */
	uint32_t chan;	/* READ: channel; else NONE */
	uint32_t tc;	/* COMPUTE; WAIT, SWAIT: task; else NONE */
	uint32_t coll;	/* COLL, RUN; WAIT, SWAIT: collective; or NONE */
	uint32_t chans, nchans; /* WRITE: channels (pool) */
};

#define CGR__PLAN_STREAM 1u /* CGR_TASK_STREAM */
#define CGR__PLAN_ASYNC 2u  /* overlap: the thread does not wait */
#define CGR__PLAN_DEVICE 4u /* CGR_TASK_DEVICE */
#define CGR__PLAN_FUSED 8u  /* a WRITE fused into its stream job */

/* A plain task's share of its program. */
struct cgr__plan_task {
	uint32_t task_id; /* the graph's task: function and argument */
	uint32_t flags;	  /* STREAM, ASYNC, DEVICE, FUSED */
	uint32_t tidx;	  /* its place among the stream tasks */
	uint32_t in, nin; /* input ports (pool; CGR_INPUT_ALL expanded) */
	uint32_t out, nout;
	uint32_t fw, nfw; /* FUSED: the fused WRITE's channels (pool) */
	uint32_t name;	  /* string table offset */
	uint32_t pad;
};

#define CGR__PLAN_STATIC 1u	/* static shapes */
#define CGR__PLAN_EDGE 2u	/* a device-transport edge's broadcast */
#define CGR__PLAN_NCCL 4u	/* on NCCL */
#define CGR__PLAN_CASYNC 8u	/* overlap: on its communication stream */
#define CGR__PLAN_JOINS_ALL 16u /* finishing proves all members started */
#define CGR__PLAN_CFUSED 32u	/* a WRITE fused into its stream job */
#define CGR__PLAN_SPANS 64u	/* its members are on several hosts */

/* A member's share of a collective. */
struct cgr__plan_coll {
	uint32_t task_id; /* the graph's task; its board */
	uint32_t flags;	  /* STATIC, EDGE, NCCL, CASYNC, JOINS_ALL, CFUSED */
	int32_t kind;	  /* enum cgr_coll_kind */
	int32_t op;	  /* cgr_redop */
	int32_t root, rank, n;
	uint32_t k;		 /* tensors per member */
	int32_t cstream, sclass; /* enum cgr__stream_class */
	uint32_t sidx;
	int32_t overlap;    /* enum cgr_overlap_mode */
	uint32_t opi;	    /* its COLL's index in the program */
	uint32_t swait;	    /* the stream task its stream joins, or NONE */
	uint32_t root_port; /* edge: the producer's port, or NONE */
	uint32_t in, out;   /* k ports each (pool; NONE: none here) */
	uint32_t all_in;    /* n * k ports (pool), rank-major */
	uint32_t fw, nfw;   /* CFUSED: the fused WRITE's channels */
	uint32_t name;
	uint64_t cap; /* data capacity of its outputs */
};

/* The image's sections, for the reader (after cgr__plan_check). */
struct cgr__plan {
	const struct cgr__plan_hdr *h;
	const struct cgr__plan_prog *progs;
	const struct cgr__plan_op *ops;
	const struct cgr__plan_task *tcs;
	const struct cgr__plan_coll *colls;
	const uint32_t *pool;
	const char *str;
};

/* 64-bit FNV-1a of n bytes. */
uint64_t cgr__plan_fnv(const void *p, size_t n);
/* The checksum an image's header must carry (its size read from it). */
uint64_t cgr__plan_sum(const void *img, size_t len);

/*
 * Checks the image of len bytes at img (any address, 8-byte aligned):
 * magic, version, size, checksum, then every count, offset and index.
 * 0 and *out set; or -EPROTO (not a plan of this version, or corrupted:
 * why says what) or -EINVAL (an index out of its range: why names the
 * program, the entry and the bound).
 */
int cgr__plan_check(const void *img, size_t len, struct cgr__plan *out,
		    char *why, size_t wlen);

#endif
