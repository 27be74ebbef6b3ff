/*
 * base/error.c: names and messages for every error code cgr returns, from
 * the one X-macro table in cgr.h plus the C library's errno table.
 */
#include <errno.h>
#include <string.h>

#include "base/base.h"

const char *cgr_strerror(int err)
{
	if (err == 0)
		return "success";
	switch (err) {
#define CGR__ERR_MSG(name, value, msg) \
	case value:                    \
		return msg;
		CGR_ERROR_MAP(CGR__ERR_MSG)
#undef CGR__ERR_MSG
	default:
		break;
	}
	if (err < 0 && err > CGR_ERRNO_BASE) {
		/* strerrordesc_np is thread-safe and returns a static string. */
		const char *s = strerrordesc_np(-err);
		if (s != NULL)
			return s;
	}
	return "unknown error";
}

const char *cgr_err_name(int err)
{
	if (err == 0)
		return "OK";
	switch (err) {
#define CGR__ERR_NAME(name, value, msg) \
	case value:                     \
		return #name;
		CGR_ERROR_MAP(CGR__ERR_NAME)
#undef CGR__ERR_NAME
	default:
		break;
	}
	if (err == -ENOTSUP)
		return "ENOTSUP"; /* (EOPNOTSUPP's number: cgr says ENOTSUP) */
	if (err < 0 && err > CGR_ERRNO_BASE) {
		const char *s = strerrorname_np(-err);
		if (s != NULL)
			return s;
	}
	return "EUNKNOWN";
}
