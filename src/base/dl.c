/*
 * base/dl.c: function tables from libraries loaded at run time (dl.h).
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/dl.h"

int cgr__lib_resolve(void *h, const char *lib, void *table,
		     const struct cgr__lib_sym *syms, size_t n, char *why,
		     size_t wlen)
{
	for (size_t i = 0; i < n; i++) {
		void *f = dlsym(h, syms[i].name);
		if (f == NULL && !syms[i].optional) {
			snprintf(why, wlen, "%s lacks %s", lib, syms[i].name);
			return -ENODEV;
		}
		memcpy((char *)table + syms[i].off, &f, sizeof(f));
	}
	return 0;
}
