/*
 * tests/fuzz/slot.c: a slot as another process may have written it
 * (header and data from the input, a list's tables with their pointers
 * into the writer's mapping).  cgr__slot_check either refuses it or
 * cgr__value_load_view gives a value that lies inside the slot: bytes
 * and error messages within its capacity, a tensor whose size is its
 * length, a list whose every item is inside (or an error value saying the
 * list is corrupt).  The loaded value is then read whole (ASan sees any
 * byte outside) and stored again into a slot of the same capacity, which
 * must succeed or fail with a code, never crash.
 */
#include <stdlib.h>

#include "chan/chan.h"
#include "fuzz.h"

/* Reads every byte of v (ASan sees any outside the slot). */
static unsigned touch(const cgr_value *v, const unsigned char *d, size_t cap)
{
	const unsigned char *p = NULL;
	unsigned s = 0;
	size_t n = 0;

	switch (v->kind) {
	case CGR_VALUE_BYTES:
		p = v->u.bytes.data, n = v->u.bytes.len;
		break;
	case CGR_VALUE_TENSOR:
		fz_assert(v->u.tensor.byte_offset == 0);
		p = v->u.tensor.data, n = cgr_tensor_nbytes(&v->u.tensor);
		break;
	case CGR_VALUE_ERROR:
		p = (const unsigned char *)v->u.error.msg;
		n = strlen(v->u.error.msg);
		if (v->code == CGR_ECORRUPT && (p < d || p >= d + cap))
			return 0; /* cgr's own message */
		break;
	case CGR_VALUE_LIST:
		fz_assert(v->u.list.n <= CGR_MAX_LIST);
		for (size_t i = 0; i < v->u.list.n; i++) {
			fz_assert(v->u.list.items[i].kind == CGR_VALUE_BYTES ||
				  v->u.list.items[i].kind == CGR_VALUE_TENSOR);
			s += touch(&v->u.list.items[i], d, cap);
		}
		return s;
	default:
		fz_assert(v->kind == CGR_VALUE_NONE);
		return 0;
	}
	if (n > 0)
		fz_assert(p >= d && n <= cap && (size_t)(p - d) <= cap - n);
	for (size_t i = 0; i < n; i++)
		s += p[i];
	return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct cgr__list_view view;
	static unsigned sink;
	struct fz f = { data, size };
	struct cgr__slot_hdr *h, *h2;
	size_t cap = cgr__port_cap(fz_u16(&f) % 4096), n;
	/* Laid out as a port's slot: header and inline room, then (cap over
	 * the inline room) the big area.  Whether the input's big_off stands
	 * or the layout's: an input byte. */
	size_t sb = cgr__port_slot_bytes(cap, false);
	size_t room = sb + cgr__port_bigsize(cap, 1, false);
	int64_t boff = cgr__port_has_big(cap) ? (int64_t)sb : 0;
	bool keep = fz_u8(&f) & 1;
	unsigned char *d;
	cgr_value v;
	int ret;

	h = aligned_alloc(64, room);
	h2 = aligned_alloc(64, room);
	fz_assert(h != NULL && h2 != NULL);
	memset(h, 0, room);
	memset(h2, 0, room);
	h2->big_off = boff;
	n = f.n < room ? f.n : room;
	memcpy(h, f.p, n);
	if (!keep)
		h->big_off = boff;
	if (cgr__slot_check(h, cap, boff) == 0) {
		size_t ecap = h->big ? cap : cgr__slot_icap(h, cap);
		d = cgr__slot_data(h);
		fz_assert(h->len <= ecap && d + ecap <= (unsigned char *)h + room);
		/* A list whose tables say they were laid out at this very
		 * address is this process's own, loaded as it is (trusted,
		 * unchecked): not what another process can be expected to
		 * write. */
		if (h->kind == CGR_VALUE_LIST &&
		    ((const uint64_t *)(const void *)d)[1] == (uintptr_t)h)
			goto out;
		cgr__value_load_view(h, cap, &v, &view);
		if (v.kind == CGR_VALUE_TENSOR)
			fz_assert(cgr_tensor_nbytes(&v.u.tensor) == h->len &&
				  v.u.tensor.data == d);
		if (v.kind == CGR_VALUE_BYTES)
			fz_assert(v.u.bytes.len == h->len);
		sink += touch(&v, d, ecap);
		ret = cgr__value_store(h2, cap, &v);
		fz_assert(ret == 0 || ret == CGR_ETOOBIG ||
			  ret == CGR_EBADVALUE);
		if (ret == 0)
			fz_assert(cgr__slot_check(h2, cap, boff) == 0);
	}
out:
	free(h);
	free(h2);
	return 0;
}

/* Seeds: slots cgr itself wrote (each kind, a list at another address),
 * and the corruptions the process-worker tests make. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *dir = getenv("CGR_FUZZ_SEEDS");
	static int64_t shape[2] = { 2, 3 };
	static uint32_t fdata[6] = { 1, 2, 3, 4, 5, 6 };
	struct cgr__slot_hdr *h;
	cgr_value v, items[3];
	char name[64];
	uint8_t buf[3 + CGR__SLOT_HDR + 512];
	size_t cap = 512; /* no big area: the whole value after the header */

	(void)argc, (void)argv;
	if (dir == NULL || !*dir)
		return 0;
	h = aligned_alloc(64, CGR__SLOT_HDR + cap);
	items[0] = cgr_value_bytes("hello", 5);
	items[1] = cgr_value_tensor(fdata, kDLUInt, 32, 2, shape);
	items[2] = cgr_value_bytes(NULL, 0);
	for (int k = 0; k < 8; k++) {
		memset(h, 0, CGR__SLOT_HDR + cap);
		switch (k % 4) {
		case 0:
			v = items[0];
			break;
		case 1:
			v = items[1];
			break;
		case 2:
			v.kind = CGR_VALUE_ERROR;
			v.code = CGR_ETASK;
			v.u.error.msg = "task failed: a message";
			break;
		default:
			v = cgr_value_list(items, 3);
			break;
		}
		cgr__value_store(h, cap, &v);
		if (k == 4)
			h->len = (uint64_t)1 << 40; /* as CGR_TEST_CORRUPT_SLOTS */
		if (k == 5)
			h->shape[1] = INT64_MAX; /* a size that is not its len */
		if (k == 6)
			h->kind = 77;
		if (k == 7) /* a list item past the slot */
			((cgr_value *)((unsigned char *)cgr__slot_data(h) +
				       64))[0].u.bytes.len = (size_t)1 << 30;
		buf[0] = (uint8_t)cap, buf[1] = (uint8_t)(cap >> 8);
		buf[2] = 0; /* the layout's big_off (none) */
		memcpy(buf + 3, h, CGR__SLOT_HDR + cap);
		snprintf(name, sizeof(name), "slot-%02d", k);
		fz_seed_write(dir, name, buf, sizeof(buf));
	}
	free(h);
	exit(0);
}
