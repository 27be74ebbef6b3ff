/*
 * exec/value.c: moving values in and out of buffer slots.  A slot is a
 * 128-byte header (kind, code, length, tensor dtype and shape) followed by
 * the data.  Values handed out point into the slot; values handed in are
 * copied, except when their data already is the slot's data (zero copy).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "graph/internal.h"

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

/* Strides NULL, or equal to the compact row-major strides. */
static bool cgr__tensor_compact(const DLTensor *t)
{
	int64_t expect = 1;

	if (t->strides == NULL)
		return true;
	for (int i = t->ndim; i-- > 0;) {
		if (t->shape[i] != 1 && t->strides[i] != expect)
			return false;
		expect *= t->shape[i];
	}
	return true;
}

int cgr__value_check(const cgr_value *v, size_t cap, size_t *bytes)
{
	size_t n = 0;

	switch (v->kind) {
	case CGR_VALUE_NONE:
		break;
	case CGR_VALUE_BYTES:
		if (v->u.bytes.data == NULL && v->u.bytes.len != 0)
			return CGR_EBADVALUE;
		n = v->u.bytes.len;
		break;
	case CGR_VALUE_TENSOR: {
		const DLTensor *t = &v->u.tensor;
		if (t->device.device_type != kDLCPU &&
		    t->device.device_type != kDLCUDAHost)
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
		if (n == 0) {
			/* Zero elements, or a size that overflows. */
			for (int i = 0; i < t->ndim; i++)
				if (t->shape[i] == 0)
					goto sized;
			return CGR_ETOOBIG;
		}
	sized:
		if (!cgr__tensor_compact(t))
			return CGR_EBADVALUE;
		if (n > 0 && t->data == NULL)
			return CGR_EBADVALUE;
		break;
	}
	case CGR_VALUE_ERROR:
		n = (v->u.error.msg != NULL ? strlen(v->u.error.msg) : 0) + 1;
		break;
	default:
		return CGR_EBADVALUE;
	}
	if (bytes != NULL)
		*bytes = n;
	return n > cap ? CGR_ETOOBIG : 0;
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

int cgr__value_store(struct cgr__slot_hdr *h, size_t cap, const cgr_value *v)
{
	unsigned char *d = cgr__slot_data(h);
	size_t n;
	int ret = cgr__value_check(v, cap, &n);

	if (ret < 0) {
		char msg[160];
		if (ret == CGR_ETOOBIG)
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
		if (n > 0 && v->u.bytes.data != d)
			memcpy(d, v->u.bytes.data, n);
		break;
	case CGR_VALUE_TENSOR: {
		const DLTensor *t = &v->u.tensor;
		const unsigned char *src =
			(const unsigned char *)t->data + t->byte_offset;
		h->ndim = t->ndim;
		h->dt_code = t->dtype.code;
		h->dt_bits = t->dtype.bits;
		h->dt_lanes = t->dtype.lanes;
		h->dev_type = kDLCPU;
		h->dev_id = 0;
		for (int i = 0; i < t->ndim; i++)
			h->shape[i] = t->shape[i];
		if (n > 0 && src != d)
			memcpy(d, src, n);
		break;
	}
	case CGR_VALUE_ERROR:
		h->code = v->code != 0 ? v->code : CGR_ETASK;
		memcpy(d, v->u.error.msg != NULL ? v->u.error.msg : "", n);
		break;
	default:
		break;
	}
	return 0;
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
	default:
		v->kind = CGR_VALUE_NONE;
		break;
	}
}
