/*
 * tests/fuzz/fuzz.h: what the fuzz targets share (fz_ prefix): a reader
 * of the fuzzer's bytes that never runs out (missing bytes read as 0),
 * and a decoder that turns them into a cgr_value a caller could hand in:
 * bytes, tensors (any shape, dtype, strides and byte_offset), lists,
 * error values and unknown kinds, with sizes near every boundary.
 *
 * Soundness: cgr may read a value's data only once it accepted it, and
 * it accepts only values no larger than the buffer it was asked about
 * (at most FZ_BACKED bytes in these targets).  So every value whose data
 * range does not wrap and whose size is at most FZ_BACKED gets real
 * memory behind it (a pattern); larger ones, and ranges that
 * wrap, get addresses that are never mapped.  A target that sees cgr
 * read one of those has found a bug, and ASan says so.
 *
 * Seeds: each target writes its seed inputs with fz_seed_write when
 * CGR_FUZZ_SEEDS names a directory (scripts/fuzz.sh --seeds).
 */
#ifndef CGR_FUZZ_H
#define CGR_FUZZ_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cgr.h>

/* The largest value the decoder backs with memory. */
#define FZ_BACKED (64u * 1024)

struct fz {
	const uint8_t *p;
	size_t n;
};

static inline uint64_t fz_bytes(struct fz *f, size_t k)
{
	uint64_t v = 0;

	for (size_t i = 0; i < k; i++) {
		uint64_t b = 0;
		if (f->n > 0) {
			b = *f->p++;
			f->n--;
		}
		v |= b << (8 * i);
	}
	return v;
}

static inline uint8_t fz_u8(struct fz *f)
{
	return (uint8_t)fz_bytes(f, 1);
}

static inline uint16_t fz_u16(struct fz *f)
{
	return (uint16_t)fz_bytes(f, 2);
}

static inline uint64_t fz_u64(struct fz *f)
{
	return fz_bytes(f, 8);
}

/* A size or count: small mostly, else near a boundary, else anything. */
static inline uint64_t fz_size(struct fz *f)
{
	static const uint64_t edge[] = {
		0,
		1,
		63,
		64,
		255,
		256,
		4095,
		4096,
		FZ_BACKED,
		FZ_BACKED + 1,
		(uint64_t)1 << 31,
		(uint64_t)1 << 32,
		(uint64_t)1 << 40,
		((uint64_t)1 << 40) + 1,
		(uint64_t)1 << 61,
		(uint64_t)1 << 62,
		(uint64_t)1 << 63,
		((uint64_t)1 << 63) - 1,
		UINT64_MAX - 127,
		UINT64_MAX - 70,
		UINT64_MAX - 64,
		UINT64_MAX - 63,
		UINT64_MAX - 1,
		UINT64_MAX,
	};
	uint8_t m = fz_u8(f);

	if (m < 160)
		return m % 40;
	if (m < 200)
		return fz_u16(f) % 2048;
	if (m < 240)
		return edge[fz_u8(f) % (sizeof(edge) / sizeof(edge[0]))];
	return fz_u64(f);
}

/* Memory the decoder hands out for one input, freed by fz_arena_free. */
struct fz_arena {
	void *blk[CGR_MAX_LIST * 3 + 8];
	size_t n;
};

static inline void *fz_alloc(struct fz_arena *a, size_t n)
{
	void *p;

	if (a->n == sizeof(a->blk) / sizeof(a->blk[0]))
		return NULL;
	p = malloc(n ? n : 1);
	if (p != NULL)
		a->blk[a->n++] = p;
	return p;
}

static inline void fz_arena_free(struct fz_arena *a)
{
	for (size_t i = 0; i < a->n; i++)
		free(a->blk[i]);
	a->n = 0;
}

/*
 * A data pointer for need bytes at byte offset off: one where data + off
 * is real memory of need bytes (a pattern) when need fits
 * FZ_BACKED (data + off may wrap then: cgr must refuse it), else an
 * address never mapped; or NULL; or one near the top of the address
 * space, chosen so that the range wraps (or is empty).  *backed says
 * whether cgr may read need bytes at data + off.
 */
static inline void *fz_data(struct fz *f, struct fz_arena *a, uint64_t need,
			    uint64_t off, bool *backed)
{
	unsigned __int128 end = (unsigned __int128)need + off;
	uint8_t m = fz_u8(f) % 8, fill;
	unsigned char *p;

	*backed = false;
	if (m == 6) {
		*backed = need == 0;
		return NULL;
	}
	if (m == 7) {
		/* data + end reaches 2^64 or up to 255 bytes past: it
		 * wraps (the end is no address). */
		uint64_t k = fz_u8(f);
		if (end == 0) {
			*backed = true;
			return (void *)(uintptr_t)(UINTPTR_MAX - k);
		}
		if (end > UINTPTR_MAX)
			return (void *)(uintptr_t)(k + 1);
		return (void *)(uintptr_t)(UINTPTR_MAX - (uint64_t)end + 1 +
					   k % (uint64_t)end);
	}
	fill = fz_u8(f);
	if (need == 0 && off == 0) {
		*backed = true; /* nothing to read */
		return (void *)(uintptr_t)(m == 5 ? 4096 : 0);
	}
	if (need > FZ_BACKED || (p = fz_alloc(a, (size_t)need)) == NULL)
		/* Too big to be read: 4096, or a low address. */
		return (void *)(uintptr_t)(m == 5 ? fill + 1u : 4096);
	for (size_t i = 0; i < (size_t)need; i++)
		p[i] = (uint8_t)(i * 131 + fill);
	*backed = off <= (uintptr_t)p;
	return (void *)((uintptr_t)p - (uintptr_t)off);
}

/* The bytes a tensor claims (UINT64_MAX past 2^64, 0 if malformed). */
static inline uint64_t fz_tensor_bytes(const DLTensor *t)
{
	unsigned __int128 n = (unsigned __int128)t->dtype.bits *
			      t->dtype.lanes / 8;

	if (t->ndim > 0 && t->shape == NULL)
		return 0;
	for (int i = 0; i < t->ndim && i < CGR_MAX_NDIM; i++) {
		if (t->shape[i] < 0)
			return 0;
		n *= (uint64_t)t->shape[i];
		if (n > UINT64_MAX)
			n = (unsigned __int128)UINT64_MAX + 1;
	}
	return n > UINT64_MAX ? UINT64_MAX : (uint64_t)n;
}

/* Storage of one decoded value: shapes, strides, list items, message. */
struct fz_value {
	cgr_value v;
	cgr_value items[CGR_MAX_LIST + 2];
	int64_t shape[CGR_MAX_LIST + 1][CGR_MAX_NDIM];
	int64_t strides[CGR_MAX_LIST + 1][CGR_MAX_NDIM];
	char msg[300];
	bool backed; /* every item's data is real memory */
};

static inline void fz_tensor(struct fz *f, struct fz_arena *a, cgr_value *v,
			     int64_t *shape, int64_t *strides, bool *backed)
{
	DLTensor *t = &v->u.tensor;
	static const uint8_t bits[] = { 8, 16, 32, 64, 0, 1, 4, 12, 128 };
	uint8_t m = fz_u8(f);
	int64_t expect = 1;

	memset(v, 0, sizeof(*v));
	v->kind = CGR_VALUE_TENSOR;
	t->ndim = (int)(m % 10) - (m >= 250 ? 12 : 0); /* some bad ranks */
	t->device.device_type = fz_u8(f) < 250 ? kDLCPU : (DLDeviceType)fz_u8(f);
	t->dtype.code = kDLUInt;
	t->dtype.bits = bits[fz_u8(f) % sizeof(bits)];
	t->dtype.lanes = (uint16_t)(fz_u8(f) < 240 ? 1 : fz_u16(f));
	t->shape = t->ndim > 0 && fz_u8(f) != 255 ? shape : NULL;
	for (int i = 0; i < t->ndim && i < CGR_MAX_NDIM; i++) {
		uint8_t s = fz_u8(f);
		shape[i] = s < 200   ? (int64_t)(s % 6) :
			   s < 250 ? (int64_t)fz_size(f) :
				     -(int64_t)(s - 249);
	}
	/* Strides: none, compact, or anything. */
	m = fz_u8(f) % 4;
	if (m >= 2 && t->ndim > 0 && t->ndim <= CGR_MAX_NDIM) {
		for (int i = t->ndim; i-- > 0;) {
			strides[i] = m == 2 ? expect : (int64_t)fz_size(f);
			expect = (int64_t)((uint64_t)expect *
					   (uint64_t)shape[i]);
		}
		t->strides = strides;
	}
	t->byte_offset = fz_u8(f) < 200 ? fz_u8(f) % 72 : fz_size(f);
	t->data = fz_data(f, a, fz_tensor_bytes(t), t->byte_offset, backed);
}

static inline void fz_item(struct fz *f, struct fz_arena *a, cgr_value *v,
			   int64_t *shape, int64_t *strides, bool *backed)
{
	uint8_t k = fz_u8(f) % 16;
	uint64_t len;

	*backed = true;
	if (k < 6) {
		len = fz_size(f);
		*v = cgr_value_bytes(fz_data(f, a, len, 0, backed), len);
	} else if (k < 13) {
		fz_tensor(f, a, v, shape, strides, backed);
	} else if (k == 13) {
		memset(v, 0, sizeof(*v)); /* CGR_VALUE_NONE */
	} else {
		memset(v, 0, sizeof(*v));
		v->kind = k == 14 ? CGR_VALUE_ERROR : 5 + fz_u8(f);
		v->u.error.msg = "an item that is no item";
	}
}

/* Decodes one value from f into out (its storage); list items may be of
 * any kind, so that bad ones come too. */
static inline void fz_value(struct fz *f, struct fz_arena *a,
			    struct fz_value *out)
{
	uint8_t k = fz_u8(f) % 8;
	bool b;

	out->backed = true;
	if (k < 5) {
		fz_item(f, a, &out->v, out->shape[CGR_MAX_LIST],
			out->strides[CGR_MAX_LIST], &out->backed);
	} else if (k == 5) {
		size_t n = fz_u8(f) % 4 ? fz_u8(f) % 5 : fz_u8(f) % 70;
		memset(out->msg, 0, sizeof(out->msg));
		for (size_t i = 0; i + 1 < sizeof(out->msg) && i < n * 5; i++)
			out->msg[i] = (char)('a' + i % 26);
		memset(&out->v, 0, sizeof(out->v));
		out->v.kind = CGR_VALUE_ERROR;
		out->v.code = -(int)fz_u16(f);
		out->v.u.error.msg = fz_u8(f) == 255 ? NULL : out->msg;
	} else {
		size_t n = fz_u8(f) % (CGR_MAX_LIST + 2);
		for (size_t i = 0; i < n; i++) {
			fz_item(f, a, &out->items[i],
				out->shape[i % CGR_MAX_LIST],
				out->strides[i % CGR_MAX_LIST], &b);
			out->backed = out->backed && b;
		}
		out->v = cgr_value_list(fz_u8(f) == 255 ? NULL : out->items,
					n);
	}
}

/* Seeds: writes name in dir with the n bytes of p. */
static inline void fz_seed_write(const char *dir, const char *name,
				 const void *p, size_t n)
{
	char path[4096];
	FILE *fp;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fp = fopen(path, "wb");
	if (fp == NULL) {
		perror(path);
		exit(1);
	}
	if (n > 0 && fwrite(p, 1, n, fp) != n) {
		perror(path);
		exit(1);
	}
	fclose(fp);
}

/* Whether v is, or holds, a tensor in CUDA device memory (cgr refuses
 * those in host slots: a CGR_EBADVALUE error value). */
static inline bool fz_on_device(const cgr_value *v)
{
	if (v->kind == CGR_VALUE_TENSOR)
		return v->u.tensor.device.device_type == kDLCUDA;
	for (size_t i = 0; v->kind == CGR_VALUE_LIST && v->u.list.items != NULL &&
			    i < v->u.list.n;
	     i++)
		if (fz_on_device(&v->u.list.items[i]))
			return true;
	return false;
}

/* Whether got, as cgr handed it out (a slot of cap data bytes at d; d
 * NULL: anywhere), is the value src that was handed in. */
static inline bool fz_same(const cgr_value *src, const cgr_value *got,
			   const unsigned char *d, size_t cap)
{
	const unsigned char *p;
	size_t n;

	if (src->kind != got->kind)
		return false;
	switch (src->kind) {
	case CGR_VALUE_NONE:
		return true;
	case CGR_VALUE_BYTES:
		n = src->u.bytes.len;
		p = got->u.bytes.data;
		if (got->u.bytes.len != n ||
		    (d != NULL && n > 0 && (p < d || p + n > d + cap)))
			return false;
		return n == 0 || memcmp(p, src->u.bytes.data, n) == 0;
	case CGR_VALUE_TENSOR: {
		const DLTensor *a = &src->u.tensor, *b = &got->u.tensor;
		if (a->ndim != b->ndim || a->dtype.code != b->dtype.code ||
		    a->dtype.bits != b->dtype.bits ||
		    a->dtype.lanes != b->dtype.lanes ||
		    b->device.device_type != kDLCPU || b->byte_offset != 0 ||
		    (b->strides != NULL && b->ndim > 0))
			return false;
		for (int i = 0; i < a->ndim; i++)
			if (a->shape[i] != b->shape[i])
				return false;
		n = cgr_tensor_nbytes(b);
		p = b->data;
		if (d != NULL && n > 0 && (p < d || p + n > d + cap))
			return false;
		return n == 0 ||
		       memcmp(p, (const unsigned char *)a->data + a->byte_offset,
			      n) == 0;
	}
	case CGR_VALUE_ERROR: {
		const char *m = src->u.error.msg ? src->u.error.msg : "";
		n = strlen(m);
		if (got->code != (src->code ? src->code : CGR_ETASK))
			return false;
		if (n + 1 > cap)
			n = cap - 1;
		return strlen(got->u.error.msg) == n &&
		       memcmp(got->u.error.msg, m, n) == 0;
	}
	case CGR_VALUE_LIST:
		if (src->u.list.n != got->u.list.n)
			return false;
		for (size_t i = 0; i < src->u.list.n; i++)
			if (!fz_same(&src->u.list.items[i], &got->u.list.items[i],
				     d, cap))
				return false;
		return true;
	default:
		return false;
	}
}

/* ---- seeds: fz_value's encoding, for the cases worth starting from ---- */

struct fz_enc {
	uint8_t b[1024];
	size_t n;
};

static inline void fz_put(struct fz_enc *e, uint64_t v, size_t k)
{
	for (size_t i = 0; i < k && e->n < sizeof(e->b); i++)
		e->b[e->n++] = (uint8_t)(v >> (8 * i));
}

/* A size as fz_size reads it back exactly. */
static inline void fz_put_size(struct fz_enc *e, uint64_t v)
{
	if (v < 40) {
		fz_put(e, v, 1);
	} else {
		fz_put(e, 255, 1);
		fz_put(e, v, 8);
	}
}

/* Item: bytes of len at data mode (0: real, or 4096 past FZ_BACKED; 5:
 * real, or 10 past FZ_BACKED; 6: NULL; 7: wrapping). */
static inline void fz_put_bytes(struct fz_enc *e, uint64_t len, int mode)
{
	fz_put(e, 0, 1);
	fz_put_size(e, len);
	fz_put(e, (uint64_t)mode, 1);
	fz_put(e, 9, 1); /* the fill, or how far past the top */
}

/* Item: a uint tensor of bits (8, 16, 32 or 64), shape[ndim], strides
 * (NULL: none), byte_offset off, data mode as fz_put_bytes. */
static inline void fz_put_tensor(struct fz_enc *e, int bits, int ndim,
				 const int64_t *shape, const int64_t *strides,
				 uint64_t off, int mode)
{
	fz_put(e, 6, 1);
	fz_put(e, (uint64_t)ndim, 1);
	fz_put(e, 0, 1); /* CPU */
	fz_put(e, bits == 8 ? 0 : bits == 16 ? 1 : bits == 32 ? 2 : 3, 1);
	fz_put(e, 0, 1); /* one lane */
	if (ndim > 0)
		fz_put(e, 0, 1); /* a shape */
	for (int i = 0; i < ndim; i++) {
		if (shape[i] < 6) {
			fz_put(e, (uint64_t)shape[i], 1);
		} else {
			fz_put(e, 200, 1);
			fz_put_size(e, (uint64_t)shape[i]);
		}
	}
	fz_put(e, strides != NULL ? 3 : 0, 1);
	for (int i = ndim; strides != NULL && i-- > 0;)
		fz_put_size(e, (uint64_t)strides[i]);
	if (off < 72) {
		fz_put(e, 0, 1);
		fz_put(e, off, 1);
	} else {
		fz_put(e, 200, 1);
		fz_put_size(e, off);
	}
	fz_put(e, (uint64_t)mode, 1);
	fz_put(e, 9, 1);
}

/* Writes the value seeds (the cases and plain good values) to
 * dir, named prefix<k>, each followed by tail (n bytes: what a target
 * reads after the value). */
static inline void fz_value_seeds(const char *dir, const char *prefix,
				  const void *tail, size_t n)
{
	static const int64_t s4[] = { 4 }, s16[] = { 16 }, s3[] = { 2, 3, 4 };
	static const int64_t big[] = { (int64_t)1 << 60 };
	static const int64_t ovf[] = { (int64_t)1 << 40, (int64_t)1 << 40 };
	static const int64_t zero[] = { 0, (int64_t)1 << 40, (int64_t)1 << 40 };
	static const int64_t zstr[] = { INT64_MAX, (int64_t)1 << 40, 1 };
	static const int64_t cstr[] = { 12, 4, 1 };
	struct fz_enc e;
	char name[64];
	int k = 0;

#define FZ_SEED(body)                                           \
	do {                                                    \
		e.n = 0;                                        \
		body;                                           \
		if (n > 0 && e.n + n <= sizeof(e.b)) {          \
			memcpy(e.b + e.n, tail, n);             \
			e.n += n;                               \
		}                                               \
		snprintf(name, sizeof(name), "%s%02d", prefix, k++); \
		fz_seed_write(dir, name, e.b, e.n);             \
	} while (0)
	FZ_SEED(fz_put(&e, 0, 1); fz_put_bytes(&e, 8, 0));
	FZ_SEED(fz_put(&e, 0, 1); fz_put_tensor(&e, 32, 3, s3, cstr, 8, 0));
	/* byte_offset wraps: data + off points at real memory, mod 2^64. */
	FZ_SEED(fz_put(&e, 0, 1);
		fz_put_tensor(&e, 32, 1, s4, NULL, UINT64_MAX - 4095, 0));
	FZ_SEED(fz_put(&e, 0, 1); fz_put_tensor(&e, 8, 1, s16, NULL, 0, 7));
	FZ_SEED(fz_put(&e, 6, 1); fz_put(&e, 2, 1); fz_put_bytes(&e, 8, 0);
		fz_put_tensor(&e, 32, 1, s4, NULL, UINT64_MAX - 4095, 0);
		fz_put(&e, 0, 1));
	/* A list of two items of 2^63 bytes: the total wraps. */
	FZ_SEED(fz_put(&e, 6, 1); fz_put(&e, 2, 1);
		fz_put_tensor(&e, 64, 1, big, NULL, 0, 0);
		fz_put_tensor(&e, 64, 1, big, NULL, 0, 0); fz_put(&e, 0, 1));
	FZ_SEED(fz_put(&e, 6, 1); fz_put(&e, 1, 1);
		fz_put_bytes(&e, UINT64_MAX - 70, 7); fz_put(&e, 0, 1));
	/* One item at address 10 that fits, but its padding wraps. */
	FZ_SEED(fz_put(&e, 6, 1); fz_put(&e, 1, 1);
		fz_put_bytes(&e, UINT64_MAX - 70, 5); fz_put(&e, 0, 1));
	FZ_SEED(fz_put(&e, 0, 1); fz_put_bytes(&e, UINT64_MAX - 64, 0));
	FZ_SEED(fz_put(&e, 0, 1); fz_put_tensor(&e, 32, 2, ovf, NULL, 0, 0));
	/* Zero elements, strides whose product overflows. */
	FZ_SEED(fz_put(&e, 0, 1); fz_put_tensor(&e, 8, 3, zero, zstr, 0, 0));
	FZ_SEED(fz_put(&e, 5, 1); fz_put(&e, 1, 1); fz_put(&e, 3, 1);
		fz_put(&e, 22, 2); fz_put(&e, 0, 1));
	FZ_SEED(fz_put(&e, 6, 1); fz_put(&e, 3, 1); fz_put_bytes(&e, 5, 0);
		fz_put_tensor(&e, 16, 1, s4, NULL, 2, 0);
		fz_put_bytes(&e, 0, 6); fz_put(&e, 0, 1));
#undef FZ_SEED
}

/* A failed invariant: say which and abort (the fuzzer saves the input). */
#define fz_assert(cond)                                                  \
	do {                                                             \
		if (!(cond)) {                                           \
			fprintf(stderr, "%s:%d: invariant failed: %s\n", \
				__FILE__, __LINE__, #cond);              \
			abort();                                         \
		}                                                        \
	} while (0)

/*
 * The one-task graph the execute and output targets run: input 0 through
 * task fn (named name, up to max_out bytes out) on one thread worker to
 * output 0, compiled with p (may be NULL).  The context lives as long as
 * the process.
 */
static inline cgr_compiled *fz_one_task(const char *name, cgr_task_fn fn,
					size_t max_out,
					const cgr_compile_params *p)
{
	cgr_task_desc d = CGR_TASK_DESC_INIT;
	cgr_compiled *c;
	cgr_ctx *ctx;
	cgr_worker *w;
	cgr_graph *g;
	cgr_node *in, *out;

	fz_assert(cgr_ctx_create(NULL, &ctx) == 0);
	fz_assert(cgr_worker_create(ctx, NULL, &w) == 0);
	fz_assert(cgr_graph_create(ctx, &g) == 0);
	fz_assert(cgr_graph_input(g, 0, &in) == 0);
	d.name = name;
	d.fn = fn;
	d.max_out_bytes = max_out;
	fz_assert(cgr_graph_task(g, w, &d, &in, 1, &out, 1) == 0);
	fz_assert(cgr_graph_output(g, &out, 1) == 0);
	fz_assert(cgr_graph_compile(g, p, &c) == 0);
	cgr_graph_destroy(g);
	return c;
}

#endif
