/*
 * tests/fuzz/value.c: the value checker, store and load of chan/value.c
 * (no graph).  A decoded value (tests/fuzz/fuzz.h) and a slot capacity:
 * cgr_tensor_nbytes agrees with a 128-bit product; cgr__value_check
 * returns 0, CGR_ETOOBIG or CGR_EBADVALUE, never accepts a value whose
 * data is not real memory or that is larger than the capacity; what it
 * accepts stores into a slot of that capacity (laid out as a port's: a
 * value over the inline room in its big area), passes cgr__slot_check,
 * and loads back equal (data inside the slot), from the slot itself and
 * from a copy at another address (a list relocated through a view, as a
 * reader in another process does).
 */
#include <stdlib.h>

#include "chan/chan.h"
#include "fuzz.h"

static void check_nbytes(const cgr_value *v)
{
	const DLTensor *t = &v->u.tensor;
	uint64_t want;
	size_t got;

	if (v->kind != CGR_VALUE_TENSOR)
		return;
	got = cgr_tensor_nbytes(t);
	if (t->ndim < 0 || t->ndim > CGR_MAX_NDIM ||
	    (t->ndim > 0 && t->shape == NULL) ||
	    ((size_t)t->dtype.bits * t->dtype.lanes) % 8 != 0) {
		fz_assert(got == 0);
		return;
	}
	want = fz_tensor_bytes(t); /* UINT64_MAX: overflowed (or is) */
	fz_assert(got == (want == UINT64_MAX ? 0 : want));
}

/* Bytes of a slot of cap data bytes laid out as a port does it: the
 * header and what it holds inline, then (cap over the inline room) its
 * big area. */
static size_t slot_bytes(size_t cap)
{
	size_t sb = cgr__port_slot_bytes(cap, false);

	return sb + cgr__port_bigsize(cap, 1, false);
}

/* Such a slot, 64-byte aligned, its data garbage and its header as a
 * port's is at init (its big area's place set). */
static struct cgr__slot_hdr *slot_new(size_t cap)
{
	struct cgr__slot_hdr *h = aligned_alloc(64, slot_bytes(cap));

	fz_assert(h != NULL);
	memset(h, 0xa5, slot_bytes(cap));
	memset(h, 0, CGR__SLOT_HDR);
	if (cgr__port_has_big(cap))
		h->big_off = (int64_t)cgr__port_slot_bytes(cap, false);
	return h;
}

/* The capacity where h's value lies (inline or its big area). */
static size_t where_cap(const struct cgr__slot_hdr *h, size_t cap)
{
	return h->big ? cap : cgr__slot_icap(h, cap);
}

static void check_store(const struct fz_value *fv, size_t cap, size_t bytes)
{
	struct cgr__slot_hdr *h = slot_new(cap), *h2 = slot_new(cap);
	static struct cgr__list_view view;
	cgr_value got;
	int ret;

	ret = cgr__value_store(h, cap, &fv->v);
	if (fz_on_device(&fv->v)) {
		fz_assert(ret == CGR_EBADVALUE && h->kind == CGR_VALUE_ERROR);
		goto out;
	}
	fz_assert(ret == 0);
	fz_assert(h->len == bytes);
	fz_assert(cgr__slot_check(h, cap, h->big_off) == 0);
	fz_assert(h->big == (bytes > CGR__INLINE_BYTES));
	cgr__value_load(h, &got);
	fz_assert(fz_same(&fv->v, &got, cgr__slot_data(h), where_cap(h, cap)));
	/* The same slot at another address: a list is relocated. */
	memcpy(h2, h, slot_bytes(cap));
	fz_assert(cgr__slot_check(h2, cap, h2->big_off) == 0);
	cgr__value_load_view(h2, cap, &got, &view);
	fz_assert(
		fz_same(&fv->v, &got, cgr__slot_data(h2), where_cap(h2, cap)));
out:
	free(h);
	free(h2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct fz_value fv;
	struct fz f = { data, size };
	struct fz_arena a = { .n = 0 };
	size_t cap, bytes = 0;
	int ret;

	fz_value(&f, &a, &fv);
	cap = cgr__port_cap(fz_u16(&f) % 8192);
	check_nbytes(&fv.v);
	for (size_t i = 0; fv.v.kind == CGR_VALUE_LIST && i < fv.v.u.list.n &&
			   fv.v.u.list.items != NULL && i < CGR_MAX_LIST;
	     i++)
		check_nbytes(&fv.v.u.list.items[i]);
	ret = cgr__value_check(&fv.v, cap, &bytes);
	fz_assert(ret == 0 || ret == CGR_ETOOBIG || ret == CGR_EBADVALUE);
	if (ret == 0) {
		fz_assert(fv.backed);
		fz_assert(bytes <= cap);
		check_store(&fv, cap, bytes);
	}
	fz_arena_free(&a);
	return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *dir = getenv("CGR_FUZZ_SEEDS");
	static const uint8_t cap256[2] = { 0, 0 }, cap4096[2] = { 0, 16 };

	(void)argc, (void)argv;
	if (dir != NULL && *dir) {
		fz_value_seeds(dir, "cap256-", cap256, 2);
		fz_value_seeds(dir, "cap4096-", cap4096, 2);
		exit(0);
	}
	return 0;
}
