/*
 * comm/kinds.c: the tables behind comm/kinds.h, and cgr_dtype_size: one
 * row per dtype (size, name, DLPack code), one name per collective kind
 * and reduction.
 */
#include "comm/kinds.h"

static const struct {
	uint8_t size, dl_code, dl_bits;
	const char *name;
} dtypes[CGR_DTYPE_COUNT] = {
	[CGR_INT8] = { 1, kDLInt, 8, "int8" },
	[CGR_UINT8] = { 1, kDLUInt, 8, "uint8" },
	[CGR_INT16] = { 2, kDLInt, 16, "int16" },
	[CGR_UINT16] = { 2, kDLUInt, 16, "uint16" },
	[CGR_INT32] = { 4, kDLInt, 32, "int32" },
	[CGR_UINT32] = { 4, kDLUInt, 32, "uint32" },
	[CGR_INT64] = { 8, kDLInt, 64, "int64" },
	[CGR_UINT64] = { 8, kDLUInt, 64, "uint64" },
	[CGR_FLOAT16] = { 2, kDLFloat, 16, "float16" },
	[CGR_BFLOAT16] = { 2, kDLBfloat, 16, "bfloat16" },
	[CGR_FLOAT32] = { 4, kDLFloat, 32, "float32" },
	[CGR_FLOAT64] = { 8, kDLFloat, 64, "float64" },
};

size_t cgr_dtype_size(cgr_dtype dt)
{
	return (int)dt >= 0 && dt < CGR_DTYPE_COUNT ? dtypes[dt].size : 0;
}

const char *cgr__dtype_name(int dt)
{
	return dt >= 0 && dt < CGR_DTYPE_COUNT ? dtypes[dt].name : "?dtype";
}

int cgr__dtype_of_dl(uint8_t code, uint8_t bits, uint16_t lanes)
{
	for (int dt = 0; dt < CGR_DTYPE_COUNT && lanes == 1; dt++)
		if (dtypes[dt].dl_bits == bits && dtypes[dt].dl_code == code)
			return dt;
	return -1;
}

void cgr__dtype_to_dl(int dt, uint8_t *code, uint8_t *bits)
{
	*code = dtypes[dt].dl_code;
	*bits = dtypes[dt].dl_bits;
}

const char *cgr__redop_name(int op)
{
	static const char *const names[CGR_REDOP_COUNT] = { "sum", "prod",
							    "min", "max",
							    "avg" };

	return op >= 0 && op < CGR_REDOP_COUNT ? names[op] : "?op";
}

const char *cgr__coll_kind_name(int kind)
{
	static const char *const names[CGR__COLL_KIND_END] = {
		[CGR_COLL_ALLREDUCE] = "allreduce",
		[CGR_COLL_ALLGATHER] = "allgather",
		[CGR_COLL_REDUCESCATTER] = "reducescatter",
		[CGR_COLL_REDUCE] = "reduce",
		[CGR_COLL_BROADCAST] = "broadcast",
		[CGR_COLL_GATHER] = "gather",
		[CGR_COLL_SCATTER] = "scatter",
		[CGR_COLL_ALLTOALL] = "alltoall",
		[CGR__COLL_SEND] = "send",
		[CGR__COLL_RECV] = "recv",
	};

	return kind > 0 && kind < CGR__COLL_KIND_END ? names[kind] : "?op";
}
