/*
 * chan/value.c: moving values in and out of buffer slots.  A slot is a
 * 128-byte header (kind, code, length, tensor dtype and shape) followed by
 * the data.  Values handed out point into the slot; values handed in are
 * copied, except when their data already is the slot's data (zero copy).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "chan/chan.h"
#include "device/device.h"

size_t cgr_tensor_nbytes(const DLTensor *t)
{
	size_t n = 1, esz;

	if (t == NULL || t->ndim < 0 || t->ndim > CGR_MAX_NDIM ||
	    (t->ndim > 0 && t->shape == NULL))
		return 0;
	esz = (size_t)t->dtype.bits * t->dtype.lanes;
	if (esz == 0 || esz % 8 != 0)
		return 0;
	for (int i = 0; i < t->ndim; i++) {
		if (t->shape[i] < 0)
			return 0;
		if (__builtin_mul_overflow(n, (size_t)t->shape[i], &n))
			return 0;
	}
	if (__builtin_mul_overflow(n, esz / 8, &n))
		return 0;
	return n;
}

/* Whether tensor t (its shape checked) has no elements. */
static bool cgr__tensor_empty(const DLTensor *t)
{
	for (int i = 0; i < t->ndim; i++)
		if (t->shape[i] == 0)
			return true;
	return false;
}

/* Strides NULL, or equal to the compact row-major strides.  A tensor of
 * zero elements is compact whatever its strides (as in NumPy): it has no
 * data to lay out.  The running product is checked: once it passes
 * INT64_MAX no stride can equal it, so only dimensions of 1 may follow. */
static bool cgr__tensor_compact(const DLTensor *t)
{
	int64_t expect = 1;
	bool big = false;

	if (t->strides == NULL || cgr__tensor_empty(t))
		return true;
	for (int i = t->ndim; i-- > 0;) {
		if (t->shape[i] == 1)
			continue;
		if (big || t->strides[i] != expect)
			return false;
		big = __builtin_mul_overflow(expect, t->shape[i], &expect);
	}
	return true;
}

/* Whether [p + off, p + off + n) wraps around the address space (then it
 * is no memory at all). */
static bool cgr__range_wraps(const void *p, uint64_t off, size_t n)
{
	uintptr_t a;

	return off > UINTPTR_MAX ||
	       __builtin_add_overflow((uintptr_t)p, (uintptr_t)off, &a) ||
	       __builtin_add_overflow(a, n, &a);
}

/* Where tensor t's data starts (a checked value: data + byte_offset does
 * not wrap).  Integer arithmetic: data may be NULL, with no elements. */
static const unsigned char *cgr__tensor_src(const DLTensor *t)
{
	return (const unsigned char *)((uintptr_t)t->data +
				       (uintptr_t)t->byte_offset);
}

/*
 * Checks a bytes or tensor value: 0 or CGR_EBADVALUE (malformed, which
 * includes a data range, data + byte_offset + size, that wraps around the
 * address space).  *bytes gets its data size: SIZE_MAX if that overflows
 * (no valid range is that long: the value fits no buffer).
 */
static int cgr__item_check(const cgr_value *v, size_t *bytes)
{
	size_t n = 0;

	switch (v->kind) {
	case CGR_VALUE_NONE:
		break;
	case CGR_VALUE_BYTES:
		if (v->u.bytes.data == NULL && v->u.bytes.len != 0)
			return CGR_EBADVALUE;
		n = v->u.bytes.len;
		if (cgr__range_wraps(v->u.bytes.data, 0, n))
			return CGR_EBADVALUE;
		break;
	case CGR_VALUE_TENSOR: {
		const DLTensor *t = &v->u.tensor;
		if (t->device.device_type != kDLCPU &&
		    t->device.device_type != kDLCUDAHost &&
		    t->device.device_type != kDLCUDA)
			return CGR_EBADVALUE;
		if (t->ndim < 0 || t->ndim > CGR_MAX_NDIM)
			return CGR_EBADVALUE;
		if (t->ndim > 0 && t->shape == NULL)
			return CGR_EBADVALUE;
		if (t->dtype.bits == 0 || t->dtype.lanes == 0 ||
		    ((size_t)t->dtype.bits * t->dtype.lanes) % 8 != 0)
			return CGR_EBADVALUE;
		for (int i = 0; i < t->ndim; i++)
			if (t->shape[i] < 0)
				return CGR_EBADVALUE;
		n = cgr_tensor_nbytes(t);
		if (n == 0 && !cgr__tensor_empty(t))
			n = SIZE_MAX; /* the size overflows */
		if (!cgr__tensor_compact(t))
			return CGR_EBADVALUE;
		if (n > 0 && t->data == NULL)
			return CGR_EBADVALUE;
		if (cgr__range_wraps(t->data, t->byte_offset,
				     n == SIZE_MAX ? 0 : n))
			return CGR_EBADVALUE;
		break;
	}
	default:
		return CGR_EBADVALUE;
	}
	*bytes = n;
	return 0;
}

/*
 * A list in a slot: a table of n values (pointing into this slot), a table
 * of n shapes, then each item's data, 64-byte aligned.  list_layout gives
 * the offsets, so any writer lays a list out the same way (on a device
 * port the tensor items sit at the same offsets of the device slot).
 */
struct cgr__list_hdr {
	uint64_t n;
	/* Where the slot was when the list was laid out: its tables point
	 * there, so another process (which maps the slot elsewhere) cannot
	 * read them. */
	uint64_t base;
	uint64_t pad[6];
};

static size_t cgr__list_data_off(size_t n)
{
	return CGR__ALIGN_UP(sizeof(struct cgr__list_hdr) +
				     n * sizeof(cgr_value) +
				     n * CGR_MAX_NDIM * sizeof(int64_t),
			     64);
}

int cgr__value_check(const cgr_value *v, size_t cap, size_t *bytes)
{
	size_t n = 0, b;
	bool over = false;
	int ret;

	switch (v->kind) {
	case CGR_VALUE_ERROR:
		n = (v->u.error.msg != NULL ? strlen(v->u.error.msg) : 0) + 1;
		break;
	case CGR_VALUE_LIST:
		if (v->u.list.n > CGR_MAX_LIST ||
		    (v->u.list.n > 0 && v->u.list.items == NULL))
			return CGR_EBADVALUE;
		n = cgr__list_data_off(v->u.list.n);
		for (size_t i = 0; i < v->u.list.n; i++) {
			const cgr_value *it = &v->u.list.items[i];
			if (it->kind != CGR_VALUE_BYTES &&
			    it->kind != CGR_VALUE_TENSOR)
				return CGR_EBADVALUE;
			ret = cgr__item_check(it, &b);
			if (ret < 0)
				return ret;
			/* Each item padded to 64 bytes: a total that
			 * overflows fits no buffer (the items after it are
			 * checked still: a malformed one says so). */
			if (b > SIZE_MAX - 63 ||
			    __builtin_add_overflow(n, CGR__ALIGN_UP(b, 64), &n))
				over = true;
		}
		break;
	default:
		ret = cgr__item_check(v, &n);
		if (ret < 0)
			return ret;
		break;
	}
	if (over)
		n = SIZE_MAX;
	if (bytes != NULL)
		*bytes = n;
	return n > cap || n == SIZE_MAX ? CGR_ETOOBIG : 0;
}

/*
 * Lays list v out in slot h (already checked to fit).  With copy_tensors
 * false the tensors' data is left for the caller to fill (a device edge
 * moves it through the communicator).  With dbase set the tensor items
 * live at the same offsets of a device slot (dbase, on CUDA device dev):
 * the host slot keeps the tables and the bytes items.
 */
static void list_layout(struct cgr__slot_hdr *h, const cgr_value *v,
			bool copy_tensors, unsigned char *dbase, int dev)
{
	unsigned char *d = cgr__slot_data(h);
	unsigned char *tb = dbase != NULL ? dbase : d;
	struct cgr__list_hdr *lh = (struct cgr__list_hdr *)d;
	size_t n = v->u.list.n, off = cgr__list_data_off(n);
	cgr_value *items = (cgr_value *)(lh + 1);
	int64_t(*shapes)[CGR_MAX_NDIM] = (void *)(items + n);

	lh->n = n;
	lh->base = (uint64_t)(uintptr_t)h;
	for (size_t i = 0; i < n; i++) {
		const cgr_value *it = &v->u.list.items[i];
		size_t b = 0;
		cgr__item_check(it, &b);
		items[i] = *it;
		if (it->kind == CGR_VALUE_BYTES) {
			if (b > 0 && it->u.bytes.data != d + off)
				memcpy(d + off, it->u.bytes.data, b);
			items[i].u.bytes.data = d + off;
		} else {
			const DLTensor *t = &it->u.tensor;
			const unsigned char *src = cgr__tensor_src(t);
			if (copy_tensors && b > 0 && src != tb + off)
				memcpy(tb + off, src, b);
			for (int k = 0; k < t->ndim; k++)
				shapes[i][k] = t->shape[k];
			items[i].u.tensor.data = tb + off;
			items[i].u.tensor.shape = shapes[i];
			items[i].u.tensor.strides = NULL;
			items[i].u.tensor.byte_offset = 0;
			items[i].u.tensor.device.device_type =
				dbase != NULL ? kDLCUDA : kDLCPU;
			items[i].u.tensor.device.device_id =
				dbase != NULL ? dev : 0;
		}
		off += CGR__ALIGN_UP(b, 64);
	}
	h->kind = CGR_VALUE_LIST;
	h->code = 0;
	h->len = off;
	h->ndim = 0;
}

void cgr__list_store(struct cgr__slot_hdr *h, const cgr_value *v,
		     bool copy_tensors)
{
	list_layout(h, v, copy_tensors, NULL, 0);
}

void cgr__list_store_dev(struct cgr__slot_hdr *h, const cgr_value *v,
			 void *dbase, int dev)
{
	list_layout(h, v, false, dbase, dev);
}

void cgr__value_store_error(struct cgr__slot_hdr *h, size_t cap, int code,
			    const char *msg)
{
	char *d = cgr__slot_data(h);
	size_t n = strlen(msg);

	if (n + 1 > cap)
		n = cap - 1;
	memcpy(d, msg, n);
	d[n] = 0;
	h->kind = CGR_VALUE_ERROR;
	h->code = code != 0 ? code : CGR_ETASK;
	h->len = n + 1;
	h->ndim = 0;
}

/* Whether v is, or holds, a tensor in CUDA device memory. */
static bool cgr__list_on_device(const cgr_value *v)
{
	if (v->kind != CGR_VALUE_LIST)
		return cgr__value_on_device(v);
	for (size_t i = 0; i < v->u.list.n; i++)
		if (cgr__value_on_device(&v->u.list.items[i]))
			return true;
	return false;
}

/* Copies n bytes into the slot: now, or in order on stream s (0 or the
 * stream's error). */
static int cgr__data_copy(void *d, const void *src, size_t n, cgr_stream *s)
{
	if (n == 0 || src == d)
		return 0;
	if (s != NULL)
		return cgr_stream_memcpy_async(s, d, src, n);
	memcpy(d, src, n);
	return 0;
}

int cgr__value_store(struct cgr__slot_hdr *h, size_t cap, const cgr_value *v)
{
	return cgr__value_store_on(h, cap, v, NULL);
}

int cgr__value_store_on(struct cgr__slot_hdr *h, size_t cap,
			const cgr_value *v, cgr_stream *s)
{
	unsigned char *d = cgr__slot_data(h);
	size_t n;
	int ret = cgr__value_check(v, cap, &n);

	if (ret == 0 && s != NULL && v->kind == CGR_VALUE_LIST) {
		cgr__value_store_error(h, cap, CGR_EBADVALUE,
				       "a stream task's output is bytes or a "
				       "tensor, not a list");
		return CGR_EBADVALUE;
	}
	if (ret == 0 && cgr__list_on_device(v)) {
		cgr__value_store_error(h, cap, CGR_EBADVALUE,
				       "a CUDA tensor in a host output (give the "
				       "task CGR_TASK_DEVICE)");
		return CGR_EBADVALUE;
	}
	if (ret < 0) {
		char msg[160];
		if (ret == CGR_ETOOBIG && n == SIZE_MAX)
			snprintf(msg, sizeof(msg),
				 "value whose size overflows exceeds its "
				 "%zu-byte buffer",
				 cap);
		else if (ret == CGR_ETOOBIG)
			snprintf(msg, sizeof(msg),
				 "value of %zu bytes exceeds its %zu-byte "
				 "buffer",
				 n, cap);
		else
			snprintf(msg, sizeof(msg), "malformed value (kind %d)",
				 v->kind);
		cgr__value_store_error(h, cap, ret, msg);
		return ret;
	}
	h->kind = (uint32_t)v->kind;
	h->code = 0;
	h->len = n;
	h->ndim = 0;
	switch (v->kind) {
	case CGR_VALUE_BYTES:
		ret = cgr__data_copy(d, v->u.bytes.data, n, s);
		break;
	case CGR_VALUE_TENSOR: {
		const DLTensor *t = &v->u.tensor;
		const unsigned char *src = cgr__tensor_src(t);
		h->ndim = t->ndim;
		h->dt_code = t->dtype.code;
		h->dt_bits = t->dtype.bits;
		h->dt_lanes = t->dtype.lanes;
		h->dev_type = kDLCPU;
		h->dev_id = 0;
		for (int i = 0; i < t->ndim; i++)
			h->shape[i] = t->shape[i];
		ret = cgr__data_copy(d, src, n, s);
		break;
	}
	case CGR_VALUE_ERROR:
		h->code = v->code != 0 ? v->code : CGR_ETASK;
		memcpy(d, v->u.error.msg != NULL ? v->u.error.msg : "", n);
		break;
	case CGR_VALUE_LIST:
		cgr__list_store(h, v, true);
		break;
	default:
		break;
	}
	if (ret < 0)
		cgr__value_store_error(h, cap, ret,
				       "the compute stream failed");
	return ret;
}

/* The bytes the tensor in slot h (its rank checked) says it has, or
 * UINT64_MAX if its shape is malformed or its size overflows: what its
 * readers copy must be what the slot holds. */
static uint64_t slot_tensor_len(const struct cgr__slot_hdr *h)
{
	DLTensor t;
	int64_t shape[CGR_MAX_NDIM];
	size_t n;

	memset(&t, 0, sizeof(t));
	memcpy(shape, h->shape, sizeof(shape));
	t.ndim = h->ndim;
	t.shape = shape;
	t.dtype.bits = h->dt_bits;
	t.dtype.lanes = h->dt_lanes;
	if (t.dtype.bits == 0 || t.dtype.lanes == 0 ||
	    ((size_t)t.dtype.bits * t.dtype.lanes) % 8 != 0)
		return UINT64_MAX;
	for (int i = 0; i < h->ndim; i++)
		if (shape[i] < 0)
			return UINT64_MAX;
	n = cgr_tensor_nbytes(&t);
	for (int i = 0; n == 0 && i < h->ndim; i++)
		if (shape[i] == 0)
			return 0; /* zero elements */
	return n == 0 ? UINT64_MAX : n;
}

int cgr__slot_check(const struct cgr__slot_hdr *h, size_t cap)
{
	const char *d = (const char *)h + CGR__SLOT_HDR;

	if (h->len > cap)
		return -EPROTO;
	switch (h->kind) {
	case CGR_VALUE_NONE:
	case CGR_VALUE_BYTES:
	case CGR_VALUE_LIST: /* loads as an error value elsewhere */
		return 0;
	case CGR_VALUE_TENSOR:
		return h->ndim >= 0 && h->ndim <= CGR_MAX_NDIM &&
				       h->dev_type == kDLCPU &&
				       slot_tensor_len(h) == h->len ?
			       0 :
			       -EPROTO;
	case CGR_VALUE_ERROR:
		return h->len > 0 && d[h->len - 1] == 0 ? 0 : -EPROTO;
	default:
		return -EPROTO;
	}
}

/* List item i of a slot another process laid out at base, read at h:
 * its data at the same offset of this mapping, its shape copied into the
 * view; -EPROTO if it does not lie inside the slot's cap bytes. */
static int item_relocate(const struct cgr__slot_hdr *h, size_t cap,
			 uint64_t base, const cgr_value *it,
			 const int64_t *shape, cgr_value *out, int64_t *vshape)
{
	uint64_t d0 = base + CGR__SLOT_HDR, p, len;
	size_t b = 0;

	*out = *it;
	if (it->kind == CGR_VALUE_BYTES) {
		p = (uint64_t)(uintptr_t)it->u.bytes.data;
		len = it->u.bytes.len;
	} else if (it->kind == CGR_VALUE_TENSOR &&
		   it->u.tensor.device.device_type == kDLCPU &&
		   it->u.tensor.ndim >= 0 && it->u.tensor.ndim <= CGR_MAX_NDIM) {
		memcpy(vshape, shape, (size_t)it->u.tensor.ndim * 8);
		out->u.tensor.shape = vshape;
		out->u.tensor.strides = NULL;
		out->u.tensor.byte_offset = 0;
		if (cgr__item_check(out, &b) < 0)
			return -EPROTO;
		p = (uint64_t)(uintptr_t)it->u.tensor.data;
		len = b;
	} else {
		return -EPROTO;
	}
	if (p < d0 || p - d0 > cap || len > cap - (p - d0))
		return -EPROTO;
	p = (uint64_t)(uintptr_t)cgr__slot_data((struct cgr__slot_hdr *)h) +
	    (p - d0);
	if (it->kind == CGR_VALUE_BYTES)
		out->u.bytes.data = (const void *)(uintptr_t)p;
	else
		out->u.tensor.data = (void *)(uintptr_t)p;
	return 0;
}

static int list_relocate(struct cgr__slot_hdr *h, size_t cap, cgr_value *v,
			 struct cgr__list_view *view)
{
	const struct cgr__list_hdr *lh = (const void *)cgr__slot_data(h);
	const cgr_value *items = (const cgr_value *)(lh + 1);
	size_t n = (size_t)lh->n;
	const int64_t(*shapes)[CGR_MAX_NDIM];

	if (n > CGR_MAX_LIST || cgr__list_data_off(n) > cap)
		return -EPROTO;
	shapes = (const void *)(items + n); /* n checked first */
	for (size_t i = 0; i < n; i++)
		if (item_relocate(h, cap, lh->base, &items[i], shapes[i],
				  &view->items[i], view->shapes[i]) < 0)
			return -EPROTO;
	memset(v, 0, sizeof(*v));
	v->kind = CGR_VALUE_LIST;
	v->u.list.n = n;
	v->u.list.items = view->items;
	return 0;
}

void cgr__value_load_view(struct cgr__slot_hdr *h, size_t cap, cgr_value *v,
			  struct cgr__list_view *view)
{
	const struct cgr__list_hdr *lh = (const void *)cgr__slot_data(h);

	if (h->kind != CGR_VALUE_LIST || view == NULL ||
	    lh->base == (uint64_t)(uintptr_t)h) {
		cgr__value_load(h, v);
		return;
	}
	if (list_relocate(h, cap, v, view) < 0) {
		memset(v, 0, sizeof(*v));
		v->kind = CGR_VALUE_ERROR;
		v->code = CGR_ECORRUPT;
		v->u.error.msg = "a list from another process that does not "
				 "lie inside its slot";
	}
}

void cgr__value_load(struct cgr__slot_hdr *h, cgr_value *v)
{
	unsigned char *d = cgr__slot_data(h);

	memset(v, 0, sizeof(*v));
	v->kind = (int)h->kind;
	v->code = h->code;
	switch (h->kind) {
	case CGR_VALUE_BYTES:
		v->u.bytes.data = d;
		v->u.bytes.len = (size_t)h->len;
		break;
	case CGR_VALUE_TENSOR:
		v->u.tensor.data = d;
		v->u.tensor.device.device_type = kDLCPU;
		v->u.tensor.device.device_id = 0;
		if (h->dev_type == kDLCUDA) {
			v->u.tensor.data = (void *)(uintptr_t)h->ref;
			v->u.tensor.device.device_type = kDLCUDA;
			v->u.tensor.device.device_id = h->dev_id;
		}
		v->u.tensor.ndim = h->ndim;
		v->u.tensor.dtype.code = h->dt_code;
		v->u.tensor.dtype.bits = h->dt_bits;
		v->u.tensor.dtype.lanes = h->dt_lanes;
		v->u.tensor.shape = h->shape;
		v->u.tensor.strides = NULL;
		v->u.tensor.byte_offset = 0;
		break;
	case CGR_VALUE_ERROR:
		v->u.error.msg = (const char *)d;
		break;
	case CGR_VALUE_LIST: {
		const struct cgr__list_hdr *lh = (const void *)d;
		if (lh->base != (uint64_t)(uintptr_t)h) {
			/* Laid out in another process (or copied). */
			v->kind = CGR_VALUE_ERROR;
			v->code = CGR_EBADVALUE;
			v->u.error.msg = "a list laid out in another process "
					 "or memory, read without a view";
			break;
		}
		v->u.list.n = (size_t)lh->n;
		v->u.list.items = (const cgr_value *)(lh + 1);
		break;
	}
	default:
		v->kind = CGR_VALUE_NONE;
		break;
	}
}

/* The header of tensor t (its data elsewhere: ref, on device dev). */
static void tensor_header(struct cgr__slot_hdr *h, const DLTensor *t,
			  size_t n, int dev_type, int dev_id, const void *ref)
{
	h->kind = CGR_VALUE_TENSOR;
	h->code = 0;
	h->len = n;
	h->ndim = t->ndim;
	h->dt_code = t->dtype.code;
	h->dt_bits = t->dtype.bits;
	h->dt_lanes = t->dtype.lanes;
	h->dev_type = dev_type;
	h->dev_id = dev_id;
	h->ref = (uint64_t)(uintptr_t)ref;
	for (int i = 0; i < t->ndim; i++)
		h->shape[i] = t->shape[i];
}

void cgr__value_store_ref(struct cgr__slot_hdr *h, const cgr_value *v)
{
	const DLTensor *t = &v->u.tensor;

	tensor_header(h, t, cgr_tensor_nbytes(t), kDLCUDA, t->device.device_id,
		      cgr__tensor_src(t));
}

/* Copies n bytes to device port p's memory now (-ENODEV without the
 * cuda backend). */
static int dev_copy(const struct cgr__port *p, void *dst, const void *src,
		    size_t n)
{
#ifdef HAVE_CUDA
	return cgr__cuda_memcpy(p->ddev, dst, src, n);
#else
	(void)p, (void)dst, (void)src, (void)n;
	return -ENODEV;
#endif
}

/* List v (checked to fit) on device port p: the tables and the bytes
 * items in the host slot, the tensor items copied now from wherever
 * they are to the same offsets of the device slot. */
static int list_store_dev(const struct cgr__port *p, uint64_t seq,
			  const cgr_value *v)
{
	struct cgr__slot_hdr *h = cgr__port_slot(p, seq);
	cgr_value st;
	int ret = 0;

	cgr__list_store_dev(h, v, cgr__port_data(p, seq), p->dev);
	cgr__value_load(h, &st);
	for (size_t i = 0; ret == 0 && i < v->u.list.n; i++) {
		const DLTensor *t = &v->u.list.items[i].u.tensor;
		void *dst = st.u.list.items[i].u.tensor.data;
		const unsigned char *src;
		size_t n;
		if (v->u.list.items[i].kind != CGR_VALUE_TENSOR)
			continue;
		src = cgr__tensor_src(t);
		n = cgr_tensor_nbytes(t);
		if (n > 0 && src != dst)
			ret = dev_copy(p, dst, src, n);
	}
	if (ret < 0)
		cgr__value_store_error(h, p->cap, ret,
				       "copying a list's tensor to the device "
				       "failed");
	return ret;
}

int cgr__value_store_port(const struct cgr__port *p, uint64_t seq,
			  const cgr_value *v, cgr_stream *s)
{
	struct cgr__slot_hdr *h = cgr__port_slot(p, seq);
	unsigned char *dst = cgr__port_data(p, seq);
	const DLTensor *t = &v->u.tensor;
	const unsigned char *src;
	size_t n;
	int ret;

	if (p->dmem == NULL)
		return cgr__value_store_on(h, p->cap, v, s);
	if (v->kind == CGR_VALUE_LIST && s == NULL &&
	    cgr__value_check(v, p->cap, NULL) == 0)
		return list_store_dev(p, seq, v);
	if (v->kind != CGR_VALUE_TENSOR)
		return cgr__value_store_on(h, p->cap, v, s); /* or its error */
	ret = cgr__value_check(v, p->cap, &n);
	if (ret < 0)
		return cgr__value_store_on(h, p->cap, v, s); /* its error */
	src = cgr__tensor_src(t);
	tensor_header(h, t, n, kDLCUDA, p->dev, dst);
	if (n == 0 || src == dst)
		return 0; /* built in place: zero copy */
	ret = s != NULL ? cgr_stream_memcpy_async(s, dst, src, n) :
			  dev_copy(p, dst, src, n);
	if (ret < 0)
		cgr__value_store_error(h, p->cap, ret,
				       "copying a tensor to the device failed");
	return ret;
}
