/*
 * chan/value.c: moving values in and out of buffer slots.  A slot is a
 * 128-byte header (kind, code, length, tensor dtype and shape) followed by
 * the data, or by the first CGR__INLINE_BYTES of room, a larger value
 * going to the slot's big area (chan.h).  Values handed out point into
 * the slot; values handed in are copied, except when their data already
 * is the slot's data (zero copy).  Error values always stay inline.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "chan/chan.h"
#include "device/device.h"

/* An error value's text keeps at most ERR_TEXT_MAX bytes; its message,
 * being put together, at most ERR_MSG_MAX (the origin, the text and
 * CGR_ERROR_MAX_HOPS hops fit). */
#define ERR_TEXT_MAX 512
#define ERR_MSG_MAX 2048

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
/* The last type code DLPack defines (1.1: kDLFloat4_e2m1fn; this header
 * may be older and name fewer). */
#define CGR__DL_CODE_MAX 16

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
		if (t->dtype.code > CGR__DL_CODE_MAX ||
		    t->dtype.bits == 0 || t->dtype.lanes == 0 ||
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
		/* Its text (cut at ERR_TEXT_MAX, or to fit: an error
		 * always fits), empty task and worker. */
		n = (v->u.error.msg != NULL ?
			     strnlen(v->u.error.msg, ERR_TEXT_MAX) :
			     0) +
		    3;
		if (n > cap && cap >= 3)
			n = cap;
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
	size_t n = v->u.list.n, off = cgr__list_data_off(n), need = 0;
	unsigned char *d, *tb;
	struct cgr__list_hdr *lh;

	/* Its whole size (checked by the caller) picks its place (a device
	 * port's host slot keeps the tensors' offsets, empty). */
	(void)cgr__value_check(v, SIZE_MAX, &need);
	d = cgr__slot_place(h, need);
	tb = dbase != NULL ? dbase : d;
	lh = (struct cgr__list_hdr *)d;
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

/* ---- error values ---------------------------------------------------- */

/* A name of the origin as an error value keeps it: at most
 * CGR__ERR_NAME - 1 bytes. */
static size_t name_len(const char *s)
{
	return s != NULL ? strnlen(s, CGR__ERR_NAME - 1) : 0;
}

/* Writes an error value into slot h (cap data bytes): code, the origin
 * (execution, task and worker, tl and wl bytes, copied from anywhere but
 * h), and message m (ml bytes: the origin's prefix, the text from
 * text_off, the path from path_off with hops hops; cut: it takes no
 * more).  A message longer than the slot holds is cut at its end, which
 * then says "...": a slot of a port holds the origin whole (its names
 * and a prefix naming them take under CGR__MIN_VALUE_BYTES). */
static void err_write(struct cgr__slot_hdr *h, size_t cap, int code,
		      uint64_t execution, const char *task, size_t tl,
		      const char *worker, size_t wl, const char *m, size_t ml,
		      size_t text_off, size_t path_off, uint32_t hops, bool cut)
{
	char *d;
	size_t room;

	/* Error values stay after the header (every slot has room for
	 * one there). */
	cap = cgr__slot_icap(h, cap);
	d = cgr__slot_place(h, 0);
	if (cap < 3)
		return; /* never: a slot holds at least an empty error */
	if (tl + wl + 3 > cap)
		tl = wl = 0; /* never a port's slot */
	room = cap - tl - wl - 3;
	if (ml > room) {
		ml = room >= 3 ? room - 3 : room;
		memcpy(d, m, ml);
		if (room >= 3)
			memcpy(d + ml, "...", 3);
		if (path_off > ml)
			path_off = ml + (room >= 3 ? 3 : 0);
		if (text_off > path_off)
			text_off = path_off;
		ml += room >= 3 ? 3 : 0;
		cut = true;
	} else {
		memcpy(d, m, ml);
	}
	d[ml] = 0;
	memcpy(d + ml + 1, task, tl);
	d[ml + 1 + tl] = 0;
	memcpy(d + ml + 2 + tl, worker, wl);
	d[ml + 2 + tl + wl] = 0;
	h->kind = CGR_VALUE_ERROR;
	h->code = code != 0 ? code : CGR_ETASK;
	h->len = ml + tl + wl + 3;
	h->ndim = 0;
	h->err = (struct cgr__err_hdr){
		execution,	      (uint32_t)(ml + 1),
		(uint32_t)(ml + 2 + tl), (uint32_t)text_off,
		(uint32_t)path_off,     hops,
		cut,
	};
}

/* The message's prefix naming origin o ("" without names): its length. */
static size_t origin_prefix(char *buf, size_t len, const struct cgr__origin *o)
{
	int tl = (int)name_len(o->task), wl = (int)name_len(o->worker), n;
	const char *what = o->what != NULL ? o->what : "task";
	unsigned long long e = (unsigned long long)o->execution;

	if (tl > 0 && wl > 0)
		n = snprintf(buf, len, "%.32s %.*s on worker %.*s, execution "
				       "%llu: ",
			     what, tl, o->task, wl, o->worker, e);
	else if (tl > 0)
		n = snprintf(buf, len, "%.32s %.*s, execution %llu: ", what, tl,
			     o->task, e);
	else if (wl > 0)
		n = snprintf(buf, len, "worker %.*s, execution %llu: ", wl,
			     o->worker, e);
	else
		n = snprintf(buf, len, "%s", "");
	return n < 0 ? 0 : (size_t)n < len ? (size_t)n : len - 1;
}

void cgr__error_store(struct cgr__slot_hdr *h, size_t cap, int code,
		      const struct cgr__origin *o, const char *text)
{
	char m[ERR_MSG_MAX];
	size_t n = origin_prefix(m, sizeof(m), o), tn;

	tn = text != NULL ? strnlen(text, ERR_TEXT_MAX + 1) : 0;
	if (tn > ERR_TEXT_MAX) {
		memcpy(m + n, text, ERR_TEXT_MAX - 3);
		memcpy(m + n + ERR_TEXT_MAX - 3, "...", 3);
		tn = ERR_TEXT_MAX;
	} else {
		memcpy(m + n, text, tn);
	}
	err_write(h, cap, code, o->execution, o->task != NULL ? o->task : "",
		  name_len(o->task), o->worker != NULL ? o->worker : "",
		  name_len(o->worker), m, n + tn, n, n + tn, 0, false);
}

void cgr__value_store_error(struct cgr__slot_hdr *h, size_t cap, int code,
			    const char *msg)
{
	const struct cgr__origin none = { NULL, NULL, NULL, 0 };

	cgr__error_store(h, cap, code, &none, msg);
}

/* The error value of slot eh, read: its message (ml bytes, at most
 * ERR_MSG_MAX - 128, cut there with "..."), text and path offsets. */
static size_t err_read(const struct cgr__slot_hdr *eh, char *m,
		       size_t *text_off, size_t *path_off, bool *cut)
{
	const char *d = (const char *)eh + CGR__SLOT_HDR;
	size_t ml = eh->err.task_off > 0 ? eh->err.task_off - 1 : 0;

	*cut = eh->err.cut != 0;
	*path_off = eh->err.path_off < ml ? eh->err.path_off : ml;
	*text_off = eh->err.text_off < *path_off ? eh->err.text_off :
						   *path_off;
	if (ml > ERR_MSG_MAX - 128) {
		ml = ERR_MSG_MAX - 131;
		memcpy(m, d, ml);
		memcpy(m + ml, "...", 3);
		ml += 3;
		*cut = true;
		if (*path_off > ml)
			*path_off = ml;
		if (*text_off > *path_off)
			*text_off = *path_off;
		return ml;
	}
	memcpy(m, d, ml);
	return ml;
}

void cgr__error_forward(struct cgr__slot_hdr *h, size_t cap,
			const struct cgr__slot_hdr *eh, const char *hop)
{
	const char *d = (const char *)eh + CGR__SLOT_HDR;
	const char *task = d + eh->err.task_off, *worker = d + eh->err.worker_off;
	char m[ERR_MSG_MAX];
	size_t text_off, path_off, ml;
	uint32_t hops = eh->err.hops;
	bool cut;
	int n;

	ml = err_read(eh, m, &text_off, &path_off, &cut);
	if (hop != NULL && !cut) {
		if (hops >= CGR_ERROR_MAX_HOPS) {
			n = snprintf(m + ml, sizeof(m) - ml, ", ...");
			cut = true;
		} else {
			n = snprintf(m + ml, sizeof(m) - ml, "%s%.*s",
				     hops > 0 ? ", " : "; via ",
				     CGR__ERR_NAME + 32, hop);
			hops++;
		}
		if (n > 0)
			ml += (size_t)n < sizeof(m) - ml ? (size_t)n :
							   sizeof(m) - ml - 1;
	}
	err_write(h, cap, eh->code, eh->err.execution, task, name_len(task),
		  worker, name_len(worker), m, ml, text_off, path_off, hops,
		  cut);
}

void cgr__error_append(struct cgr__slot_hdr *h, size_t cap, const char *more)
{
	const char *d = cgr__slot_data(h);
	char m[ERR_MSG_MAX], task[CGR__ERR_NAME], worker[CGR__ERR_NAME];
	size_t text_off, path_off, ml, mn;
	bool cut;

	if (h->kind != CGR_VALUE_ERROR)
		return;
	snprintf(task, sizeof(task), "%s", d + h->err.task_off);
	snprintf(worker, sizeof(worker), "%s", d + h->err.worker_off);
	ml = err_read(h, m, &text_off, &path_off, &cut);
	mn = strnlen(more, sizeof(m) - ml - 1);
	memmove(m + path_off + mn, m + path_off, ml - path_off);
	memcpy(m + path_off, more, mn);
	err_write(h, cap, h->code, h->err.execution, task, strlen(task),
		  worker, strlen(worker), m, ml + mn, text_off, path_off + mn,
		  h->err.hops, cut);
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
	/* A value built at an offset of its own buffer overlaps it. */
	memmove(d, src, n);
	return 0;
}

int cgr__value_store(struct cgr__slot_hdr *h, size_t cap, const cgr_value *v)
{
	return cgr__value_store_on(h, cap, v, NULL);
}

int cgr__value_store_on(struct cgr__slot_hdr *h, size_t cap,
			const cgr_value *v, cgr_stream *s)
{
	unsigned char *d;
	size_t n;
	int ret = cgr__value_check(v, cap, &n);

	/* Well formed, too big or not: what can never be here is said
	 * first (a larger buffer would not make it right). */
	bool formed = ret == 0 || ret == CGR_ETOOBIG;

	if (formed && s != NULL && v->kind == CGR_VALUE_LIST) {
		cgr__value_store_error(h, cap, CGR_EBADVALUE,
				       "a stream task's output is bytes or a "
				       "tensor, not a list");
		return CGR_EBADVALUE;
	}
	if (formed && cgr__list_on_device(v)) {
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
	d = cgr__slot_place(h, n);
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
		cgr__value_store_error(h, cap, v->code,
				       v->u.error.msg != NULL ? v->u.error.msg :
								"");
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

int cgr__slot_check(const struct cgr__slot_hdr *h, size_t cap,
		    int64_t big_off)
{
	const char *d = (const char *)h + CGR__SLOT_HDR;

	/* Its place: the one this process's layout says (else it would
	 * point anywhere), holding what fits there. */
	if (h->big_off != big_off || h->big > 1 ||
	    (h->big && (big_off == 0 || h->kind == CGR_VALUE_ERROR)))
		return -EPROTO;
	if (!h->big)
		cap = cgr__slot_icap(h, cap);
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
	case CGR_VALUE_ERROR: {
		/* Three strings: the message (its text and path inside it),
		 * the task and the worker, each ending where the next
		 * starts. */
		const struct cgr__err_hdr *e = &h->err;
		if (h->len < 3 || d[h->len - 1] != 0 || e->task_off == 0 ||
		    e->worker_off <= e->task_off || e->worker_off >= h->len ||
		    d[e->task_off - 1] != 0 || d[e->worker_off - 1] != 0 ||
		    e->text_off > e->path_off || e->path_off >= e->task_off)
			return -EPROTO;
		return 0;
	}
	default:
		return -EPROTO;
	}
}

int cgr__port_slot_check(const struct cgr__port *p,
			 const struct cgr__slot_hdr *h)
{
	size_t b;

	if (p->dmem == NULL || h->kind != CGR_VALUE_TENSOR ||
	    h->dev_type != kDLCUDA)
		return cgr__slot_check(h, p->cap, cgr__port_big_off(p, h));
	/* A CUDA tensor: only where this process's device slot for this
	 * buffer is (a pointer of another process's means nothing here). */
	b = (size_t)((const unsigned char *)h - p->mem) / p->stride;
	if (h->big || h->dev_id != p->dev || h->ndim < 0 ||
	    h->ndim > CGR_MAX_NDIM || h->len > p->cap ||
	    slot_tensor_len(h) != h->len ||
	    h->ref != (uint64_t)(uintptr_t)(p->dmem + b * p->cap))
		return -EPROTO;
	return 0;
}

/* List item i of a slot another process laid out at base, read at h:
 * its data at the same offset of this mapping, its shape copied into the
 * view; -EPROTO if it does not lie inside the slot's cap bytes. */
static int item_relocate(const struct cgr__slot_hdr *h, size_t cap,
			 uint64_t base, const cgr_value *it,
			 const int64_t *shape, cgr_value *out, int64_t *vshape)
{
	uint64_t d0 = base + (uint64_t)((const unsigned char *)cgr__slot_data(
						(struct cgr__slot_hdr *)h) -
					(const unsigned char *)h),
		 p, len;
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

void cgr__value_rebase(struct cgr__slot_hdr *h, size_t src_off)
{
	struct cgr__list_hdr *lh = (void *)cgr__slot_data(h);
	size_t here = (size_t)((unsigned char *)lh - (unsigned char *)h);

	/* item_relocate reads an item at (its pointer - base - offset of the
	 * data here): base + offset must be where the sender's data began.
	 * Unsigned, so wrapping is exact. */
	if (h->kind == CGR_VALUE_LIST && h->len >= sizeof(*lh))
		lh->base = lh->base + (uint64_t)src_off - (uint64_t)here;
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
	if (list_relocate(h, h->big ? cap : cgr__slot_icap(h, cap), v, view) <
	    0) {
		memset(v, 0, sizeof(*v));
		v->kind = CGR_VALUE_ERROR;
		v->code = CGR_ECORRUPT;
		v->u.error.msg = "a list from another process that does not "
				 "lie inside its slot";
		v->u.error.task = v->u.error.worker = "";
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
		v->u.error.task = (const char *)d + h->err.task_off;
		v->u.error.worker = (const char *)d + h->err.worker_off;
		v->u.error.execution = h->err.execution;
		break;
	case CGR_VALUE_LIST: {
		const struct cgr__list_hdr *lh = (const void *)d;
		if (lh->base != (uint64_t)(uintptr_t)h) {
			/* Laid out in another process (or copied). */
			v->kind = CGR_VALUE_ERROR;
			v->code = CGR_EBADVALUE;
			v->u.error.msg = "a list laid out in another process "
					 "or memory, read without a view";
			v->u.error.task = v->u.error.worker = "";
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
	(void)cgr__slot_place(h, 0); /* nothing in the host slot */
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

int cgr__arg_check(const cgr_value *v, size_t cap, bool local)
{
	if (cgr__value_on_device(v))
		return local ? cgr__value_check(v, SIZE_MAX, NULL) :
			       CGR_EBADVALUE;
	/* A list's items are looked at only where they are (else
	 * cgr__value_check refuses it). */
	if (v->kind == CGR_VALUE_LIST && v->u.list.items != NULL &&
	    v->u.list.n <= CGR_MAX_LIST && cgr__list_on_device(v))
		return CGR_EBADVALUE;
	return cgr__value_check(v, cap, NULL);
}

void cgr__arg_store(struct cgr__slot_hdr *h, size_t cap, const cgr_value *v)
{
	if (cgr__value_on_device(v))
		cgr__value_store_ref(h, v);
	else
		(void)cgr__value_store(h, cap, v);
}

/* Copies n bytes to device port p's memory now (-ENODEV without the
 * device's backend). */
static int dev_copy(const struct cgr__port *p, void *dst, const void *src,
		    size_t n)
{
	return cgr__device_memcpy(p->ddev, dst, src, n);
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
	const DLTensor *t = &v->u.tensor;
	const unsigned char *src;
	unsigned char *dst;
	size_t n;
	int ret;

	if (p->dmem == NULL)
		return cgr__value_store_on(h, p->cap, v, s);
	dst = cgr__port_data(p, seq);
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
