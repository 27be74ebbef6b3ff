/*
 * chan/chan.h: channels between the operation that writes a value and its
 * readers.  A value lives in a port: one buffer slot per execution in
 * flight (slot seq & mask), each a 128-byte header (kind, code, length,
 * dtype, shape) followed by CGR__INLINE_BYTES of data, where every value
 * that small (and every error value) lives.  A port whose values may be
 * larger also has a big area per slot, of its whole capacity, in memory
 * that is only reserved: a larger value goes there, and its pages become
 * resident on first use only (once per slot; they stay).  So a port costs
 * what its values use, not its capacity.  A channel announces, per execution,
 * that a port's slot is ready to one reader (a worker or the driver): an
 * SPSC ring of one-line messages carrying the execution's number, and the
 * reader's doorbell.  The value itself never moves: readers see the
 * writer's slot (zero copy); chan/value.c stores values into slots and
 * loads them out.
 *
 * The worker loop (READ, WRITE), the fused WRITE at the end of a stream
 * job and the driver (arguments in, outputs out) all use these calls.
 *
 * Threads: one writer and one reader per channel, as the ring; a port's
 * slot belongs to its writer until announced, then is read-only until the
 * execution is released.
 */
#ifndef CGR_CHAN_H
#define CGR_CHAN_H

#include <stdbool.h>
#include <stdint.h>

#include "base/base.h"
#include "base/futex.h"
#include "reactor/reactor.h"
#include "ring/ring.h"

/* ---- ports and slots ------------------------------------------------ */

/*
 * An error value in a slot (kind CGR_VALUE_ERROR): its data holds three
 * strings, the message first, then the origin's task and worker names
 * (offsets, never pointers: slots are shared between processes).  The
 * message is the origin's prefix, the text (from text_off), and the path
 * (from path_off: "; via " and hops hops, cut set once it ended in "..."
 * and takes no more).
 */
struct cgr__err_hdr {
	uint64_t execution;
	uint32_t task_off, worker_off; /* from the data's start */
	uint32_t text_off, path_off;   /* in the message */
	uint32_t hops, cut;
};

/* Header of one buffer slot; the data follows at CGR__SLOT_HDR. */
struct cgr__slot_hdr {
	/* The first cache line: all that loading bytes touches. */
	uint32_t kind; /* enum cgr_value_kind */
	int32_t code;
	uint64_t len; /* data bytes */
	int32_t ndim;
	uint8_t dt_code, dt_bits;
	uint16_t dt_lanes;
	int32_t dev_type, dev_id;
	/* From this header to the slot's big area (0: none; set when the
	 * port is laid out, never after), and whether the value's data is
	 * there (else it follows the header). */
	int64_t big_off;
	uint32_t big;
	/* A tensor in device memory (dev_type kDLCUDA): where its data is
	 * (a device port's device slot, or an argument's own memory). */
	uint64_t ref;
	union {
		int64_t shape[CGR_MAX_NDIM];
		struct cgr__err_hdr err; /* CGR_VALUE_ERROR */
	};
};
#define CGR__SLOT_HDR 128
_Static_assert(sizeof(struct cgr__slot_hdr) <= CGR__SLOT_HDR,
	       "slot header must fit its reserved space");
_Static_assert(offsetof(struct cgr__slot_hdr, ref) <= 64 - 8,
	       "a bytes value's header fits one cache line");

/* Smallest data capacity of a slot: room for an error value (its
 * origin's names, CGR__ERR_NAME bytes each, and a message that starts
 * with them). */
#define CGR__MIN_VALUE_BYTES 512u
#define CGR__ERR_NAME 64
/* Data a slot holds right after its header: a value of at most this
 * many bytes lives there, a larger one in the slot's big area (if the
 * port has one: its capacity is larger). */
#define CGR__INLINE_BYTES CGR__MIN_VALUE_BYTES
/* Largest: of a channel buffer (max_value_bytes, max_out_bytes) and of a
 * constant (1 TiB).  Sizes derived from it (a port's slots times 4096
 * executions in flight, a collective's buckets) stay far from overflow. */
#define CGR__MAX_VALUE_BYTES ((size_t)1 << 40)

struct cgr__device;

/*
 * A value-producing port and its nslots buffer slots.  A device port (dev
 * a CUDA index) also has a device slot of cap bytes per execution, on that
 * device, for its tensors' data (dmem, allocated by compile/create.c);
 * everything else (the header, bytes, error messages) stays in the host
 * slot.
 *
 * A graph output's port has more buffers than slots (nbufs > nslots) and
 * a map from slot (seq & mask) to buffer, shared by every output port of
 * the graph: the driver lends a result the caller still holds its buffer
 * and gives the slot a spare one (drive/execute.c), so that held results
 * never stop later executions.  Only the driver writes the map, before it
 * admits the execution that uses the slot; readers and writers of that
 * execution see it through the admission's release.
 */
struct cgr__port {
	/* The first cache line: what reading and writing a value use. */
	unsigned char *mem;
	uint32_t *map;	     /* slot -> buffer (NULL: the identity) */
	unsigned char *dmem; /* device ports: nslots * cap bytes */
	unsigned char *big;  /* nbufs big areas of cap bytes (NULL: none) */
	size_t stride;	     /* from one buffer's slot to the next */
	size_t cap;	     /* data capacity per slot */
	size_t slot_bytes;   /* header + inline data */
	uint32_t nslots;     /* 1 for constants */
	uint32_t mask;
	uint32_t nbufs;	     /* buffers: nslots, more for graph outputs */
	int dev;	     /* CGR_DEVICE_NONE: a host port */
	struct cgr__device *ddev; /* referenced while dmem lives */
	char name[64];
};

/* The capacity a port of `want` data bytes gets (at least
 * CGR__MIN_VALUE_BYTES, a multiple of 64). */
static inline size_t cgr__port_cap(size_t want)
{
	return CGR__ALIGN_UP(want < CGR__MIN_VALUE_BYTES ? CGR__MIN_VALUE_BYTES :
							   want,
			     64);
}

/* Whether a port of capacity cgr__port_cap(want) has big areas (its
 * values may be larger than a slot holds inline). */
static inline bool cgr__port_has_big(size_t want)
{
	return cgr__port_cap(want) > CGR__INLINE_BYTES;
}

/* Bytes of a slot, header and inline data: all of its capacity if it is
 * `whole` (a constant's single slot) or the port has no big area. */
static inline size_t cgr__port_slot_bytes(size_t want, bool whole)
{
	size_t cap = cgr__port_cap(want);
	return CGR__SLOT_HDR +
	       (whole || cap <= CGR__INLINE_BYTES ? cap : CGR__INLINE_BYTES);
}

/* Bytes of its big areas (0: none; reserve them, do not touch them). */
static inline size_t cgr__port_bigsize(size_t want, uint32_t nbufs,
				       bool whole)
{
	return whole || !cgr__port_has_big(want) ?
		       0 :
		       cgr__port_cap(want) * nbufs;
}

/* Lays port p out with its nbufs buffers' slots at mem, mem + stride,
 * ... (each cgr__port_slot_bytes(want, big == NULL) bytes, 64-byte
 * aligned: the ports of a graph interleave, buffer by buffer, so that one
 * execution's slots lie together) and its big areas at big
 * (cgr__port_bigsize bytes, 64-byte aligned, or NULL: the slots hold all
 * of it), with nslots slots (a power of two, at most nbufs; the map, when
 * nbufs > nslots, is set by the caller).  Writes every slot now: a first
 * touch during an execution would be a page fault, the kernel allocating
 * on the hot path.  The big areas are left alone: a page there is faulted
 * in when a value first needs it. */
void cgr__port_init(struct cgr__port *p, void *mem, size_t stride, void *big,
		    size_t want, uint32_t nslots, uint32_t nbufs,
		    const char *name);
/* The same over slots another process laid out (read, not written). */
void cgr__port_attach(struct cgr__port *p, void *mem, size_t stride,
		      void *big, size_t want, uint32_t nslots, uint32_t nbufs,
		      const char *name);

/* The buffer execution seq uses in p. */
static inline uint32_t cgr__port_buf(const struct cgr__port *p, uint64_t seq)
{
	uint32_t i = (uint32_t)(seq & p->mask);
	return cgr__likely(p->map == NULL) ? i : p->map[i];
}

/* Buffer b of p (cgr__port_buf; the driver names a held result's). */
static inline struct cgr__slot_hdr *cgr__port_bufhdr(const struct cgr__port *p,
						    uint32_t b)
{
	return (struct cgr__slot_hdr *)(p->mem + (size_t)b * p->stride);
}

static inline struct cgr__slot_hdr *cgr__port_slot(const struct cgr__port *p,
						  uint64_t seq)
{
	return cgr__port_bufhdr(p, cgr__port_buf(p, seq));
}

/* Where the value in slot h has its data: after the header, or in the
 * slot's big area. */
static inline void *cgr__slot_data(struct cgr__slot_hdr *h)
{
	return (unsigned char *)h +
	       (cgr__unlikely(h->big) ? h->big_off : CGR__SLOT_HDR);
}

/* The data capacity after h's header: all of cap if the slot has no big
 * area. */
static inline size_t cgr__slot_icap(const struct cgr__slot_hdr *h, size_t cap)
{
	return h->big_off != 0 ? CGR__INLINE_BYTES : cap;
}

/* Where a value of n bytes would go in slot h, h unchanged.  A small
 * value reads nothing of h: the write of a slot whose line is cold does
 * not wait for it. */
static inline void *cgr__slot_where(struct cgr__slot_hdr *h, size_t n)
{
	return (unsigned char *)h + (n > CGR__INLINE_BYTES && h->big_off != 0 ?
					     h->big_off :
					     CGR__SLOT_HDR);
}

/* Where a value of n data bytes goes in slot h: after the header if it
 * fits there, else in the big area; h says so from now on (the writer's
 * choice; its readers follow it).  Returns the data's place. */
static inline void *cgr__slot_place(struct cgr__slot_hdr *h, size_t n)
{
	void *d = cgr__slot_where(h, n);

	h->big = d != (unsigned char *)h + CGR__SLOT_HDR;
	return d;
}

/* What slot h's big_off must be by p's layout (h one of p's buffers):
 * what a reader of another process's slot checks it against. */
static inline int64_t cgr__port_big_off(const struct cgr__port *p,
					const struct cgr__slot_hdr *h)
{
	size_t b = (size_t)((const unsigned char *)h - p->mem) / p->stride;

	return p->big == NULL ? 0 :
				(int64_t)((uintptr_t)(p->big + b * p->cap) -
					  (uintptr_t)h);
}

/* Where execution seq's tensor data is: the device slot of a device
 * port, the host slot's data otherwise (where its writer placed it). */
static inline void *cgr__port_data(const struct cgr__port *p, uint64_t seq)
{
	if (p->dmem != NULL)
		return p->dmem + (size_t)cgr__port_buf(p, seq) * p->cap;
	return cgr__slot_data(cgr__port_slot(p, seq));
}

/* Where the writer of execution seq puts n bytes of tensor data: the
 * device slot of a device port; in the host slot, placed for n bytes
 * (cgr__slot_place). */
static inline void *cgr__port_place(const struct cgr__port *p, uint64_t seq,
				    size_t n)
{
	if (p->dmem != NULL)
		return p->dmem + (size_t)cgr__port_buf(p, seq) * p->cap;
	return cgr__slot_place(cgr__port_slot(p, seq), n);
}

/* ---- channels ------------------------------------------------------- */

/* A channel message: the execution whose slot is ready. */
struct cgr__msg {
	uint64_t seq;
};

/* One ring from a port's writer to one reader (a worker or the driver). */
struct cgr__chan {
	void *mem;
	size_t memsize;
	struct cgr__ring prod, cons;
	struct cgr__bell *reader_bell; /* the reader's doorbell */
	unsigned port;
};

/* Bytes of ring memory for a channel carrying nslots executions. */
size_t cgr__chan_memsize(uint32_t nslots);

/* Sets up ch over mem (cgr__chan_memsize(nslots) bytes) for port `port`,
 * read by the owner of reader_bell; attach: the ring in mem was set up
 * by another process (checked, not written).  Returns 0, -EINVAL or
 * CGR_ECORRUPT. */
int cgr__chan_init(struct cgr__chan *ch, void *mem, size_t memsize,
		   uint32_t nslots, unsigned port,
		   struct cgr__bell *reader_bell, bool attach);

int cgr__chan_write_wait(struct cgr__chan *ch, uint64_t seq,
			 const _Atomic uint32_t *cancel, int64_t timeout_ns);
int cgr__chan_read_wait(struct cgr__chan *ch, struct cgr__reactor *r,
			struct cgr__bell *b, const _Atomic uint32_t *cancel,
			int mode, int64_t spin_ns, uint64_t *seq);

/*
 * Writer: announces execution seq and rings the reader's bell.  A ring
 * holds as many messages as executions may be in flight, so it is never
 * full while the driver bounds them; should it be, this waits (spinning,
 * yielding) until there is room, *cancel is set (-ECANCELED; cancel may be
 * NULL) or timeout_ns passes (-ETIMEDOUT; CGR_FOREVER: never).  Returns 0.
 */
static inline int cgr__chan_write(struct cgr__chan *ch, uint64_t seq,
				  const _Atomic uint32_t *cancel,
				  int64_t timeout_ns)
{
	struct cgr__msg m = { seq };

	if (cgr__likely(cgr__ring_enqueue(&ch->prod, &m, sizeof(m)) == 0)) {
		cgr__bell_ring(ch->reader_bell);
		return 0;
	}
	return cgr__chan_write_wait(ch, seq, cancel, timeout_ns);
}

/* Reader: the next announcement, or NULL; consumed by cgr__chan_consume. */
static inline const struct cgr__msg *cgr__chan_peek(struct cgr__chan *ch)
{
	return cgr__ring_peek(&ch->cons);
}

static inline void cgr__chan_consume(struct cgr__chan *ch)
{
	cgr__ring_consume(&ch->cons);
}

/*
 * Reader: the next announcement, consumed: *seq gets its execution.  If
 * there is none yet, waits on reactor r and the reader's bell b (mode and
 * spin_ns as cgr__reactor_wait).  Returns 0 or -ECANCELED (*cancel set).
 */
static inline int cgr__chan_read(struct cgr__chan *ch, struct cgr__reactor *r,
				 struct cgr__bell *b,
				 const _Atomic uint32_t *cancel, int mode,
				 int64_t spin_ns, uint64_t *seq)
{
	const struct cgr__msg *m = cgr__ring_peek(&ch->cons);

	if (cgr__unlikely(m == NULL))
		return cgr__chan_read_wait(ch, r, b, cancel, mode, spin_ns,
					   seq);
	*seq = m->seq;
	cgr__ring_consume(&ch->cons);
	return 0;
}

/* ---- values in slots (chan/value.c) ---------------------------------- */

/* Checks a value the caller hands in; *bytes (may be NULL) gets what it
 * takes in a slot (SIZE_MAX if that overflows).  Every size is computed
 * with overflow checks.  0, CGR_ETOOBIG (more than cap, or a size that
 * overflows) or CGR_EBADVALUE (malformed: an unknown kind, a bad shape,
 * dtype or strides, NULL data, a data range, data + byte_offset + size,
 * that wraps around the address space). */
int cgr__value_check(const cgr_value *v, size_t cap, size_t *bytes);
/* Stores v into slot h of capacity cap: 0, or the error code, an error
 * value naming it stored instead. */
int cgr__value_store(struct cgr__slot_hdr *h, size_t cap, const cgr_value *v);
/* The same with the data copied by stream s, in order (NULL: now); a
 * list is refused (CGR_EBADVALUE, stored as an error value).  A CUDA
 * tensor is refused too (it needs a device port). */
int cgr__value_store_on(struct cgr__slot_hdr *h, size_t cap,
			const cgr_value *v, cgr_stream *s);
/* Stores v into execution seq of port p, host or device: a device port
 * takes a tensor's data into its device slot (copied from any memory by
 * stream s in order, or now with cudaMemcpy; not at all when it already
 * is there), bytes and errors into the host slot; a list's tables and
 * bytes items into the host slot and its tensor items into the device
 * slot, now (a list by stream s is refused). */
int cgr__value_store_port(const struct cgr__port *p, uint64_t seq,
			  const cgr_value *v, cgr_stream *s);
/* A CUDA tensor argument, by reference: the header only (the caller keeps
 * its memory valid until the execution is released). */
void cgr__value_store_ref(struct cgr__slot_hdr *h, const cgr_value *v);
/* An argument of an execution (cgr_execute, an eager run): a CUDA tensor
 * goes by reference (no size limit), only where every reader is in this
 * process (local); one inside a list, or for a graph with workers in
 * other processes, is CGR_EBADVALUE.  Else as cgr__value_check. */
int cgr__arg_check(const cgr_value *v, size_t cap, bool local);
/* Stores a checked argument into slot h of capacity cap. */
void cgr__arg_store(struct cgr__slot_hdr *h, size_t cap, const cgr_value *v);
/* Whether v is a tensor in CUDA device memory. */
static inline bool cgr__value_on_device(const cgr_value *v)
{
	return v->kind == CGR_VALUE_TENSOR &&
	       v->u.tensor.device.device_type == kDLCUDA;
}
/* A reader's copy of a list's tables, for a list another process laid
 * out (its pointers are that process's): items and shapes relocated to
 * this mapping. */
struct cgr__list_view {
	cgr_value items[CGR_MAX_LIST];
	int64_t shapes[CGR_MAX_LIST][CGR_MAX_NDIM];
};
/* List h arrived from another host, whose slot had its data src_off bytes
 * past its header (this host's may sit elsewhere): its base moved so that
 * readers here relocate its items to where its bytes now are.  Nothing for
 * another kind. */
void cgr__value_rebase(struct cgr__slot_hdr *h, size_t src_off);
/* cgr__value_load, with a list laid out in another process relocated into
 * view (each item checked to lie inside the slot's cap bytes: else a
 * CGR_ECORRUPT error value); view NULL: as cgr__value_load. */
void cgr__value_load_view(struct cgr__slot_hdr *h, size_t cap, cgr_value *v,
			  struct cgr__list_view *view);
/* Whether slot h (cap data bytes, from another process) holds a value
 * that loads safely: 0 or -EPROTO.  big_off: what the slot's big_off must
 * be (cgr__port_big_off; 0: it has no big area). */
int cgr__slot_check(const struct cgr__slot_hdr *h, size_t cap,
		    int64_t big_off);
/* cgr__slot_check for slot h of port p, which also takes a CUDA tensor
 * in p's device slot for h's buffer (written by this process: a device
 * task's output). */
int cgr__port_slot_check(const struct cgr__port *p,
			 const struct cgr__slot_hdr *h);
/* The value in slot h, pointing into it (a list laid out elsewhere: an
 * error value saying so). */
void cgr__value_load(struct cgr__slot_hdr *h, cgr_value *v);
/* An error value of no origin (task and worker ""): code and msg. */
void cgr__value_store_error(struct cgr__slot_hdr *h, size_t cap, int code,
			    const char *msg);
/* ---- error values (chan/value.c) ------------------------------------ */

/* Where an error arises: what ("task", or a collective's kind), the
 * task's name, its worker's, the execution (NULL names: ""). */
struct cgr__origin {
	const char *what;
	const char *task;
	const char *worker;
	uint64_t execution;
};

/* Stores an error value arising at o with code (0: CGR_ETASK) and text
 * (cut to fit, never the origin). */
void cgr__error_store(struct cgr__slot_hdr *h, size_t cap, int code,
		      const struct cgr__origin *o, const char *text);
/* Stores error value e (loaded from slot eh, which may be another port's)
 * where it went on: its origin and text as they are, hop (NULL: none)
 * added to its path.  eh and h must differ. */
void cgr__error_forward(struct cgr__slot_hdr *h, size_t cap,
			const struct cgr__slot_hdr *eh, const char *hop);
/* Appends more to the text of the error value in slot h (before its
 * path), as far as it fits. */
void cgr__error_append(struct cgr__slot_hdr *h, size_t cap, const char *more);

/* Lays list v out in slot h (checked to fit); with copy_tensors false the
 * tensors' data is left for the caller (a device edge moves it). */
void cgr__list_store(struct cgr__slot_hdr *h, const cgr_value *v,
		     bool copy_tensors);
/* The same for a device port: the tensor items' data at the same offsets
 * of device slot dbase (CUDA device dev), left for the caller to fill. */
void cgr__list_store_dev(struct cgr__slot_hdr *h, const cgr_value *v,
			 void *dbase, int dev);

#endif
