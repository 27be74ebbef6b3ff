/*
 * base/dl.h: the one way cgr fills a table of function pointers from a
 * library it loaded at run time (dlopen): the GPU runtimes (device/lib.c
 * opens them), libpmix and libucp (net/).
 */
#ifndef CGR_BASE_DL_H
#define CGR_BASE_DL_H

#include <stdbool.h>
#include <stddef.h>

/* A symbol of a table: its name, where its pointer goes in the table,
 * and whether the table may go without it (left NULL). */
struct cgr__lib_sym {
	const char *name;
	size_t off;
	bool optional;
};

/*
 * Resolves syms[0..n) of handle h into table: 0, or -ENODEV with why =
 * "<lib> lacks <symbol>" for the first required one missing (optional
 * ones are left NULL).
 */
int cgr__lib_resolve(void *h, const char *lib, void *table,
		     const struct cgr__lib_sym *syms, size_t n, char *why,
		     size_t wlen);

#endif
