/*
 * device/lib.c: the loader of the GPU libraries (see lib.h).
 */
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

#include "device/lib.h"

/* The key of the loader's per-context state (cgr__ctx_state). */
static const char cgr__lib_key;

struct libcfg {
	char *path[CGR__LIB_N];
};

static int cfg_make(cgr_ctx *ctx, void **out)
{
	struct libcfg *cfg = cgr__alloc(&ctx->arena, sizeof(*cfg), 16);

	if (cfg == NULL)
		return -ENOMEM;
	memset(cfg, 0, sizeof(*cfg));
	*out = cfg;
	return 0;
}

static void cfg_fini(cgr_ctx *ctx, void *p)
{
	struct libcfg *cfg = p;

	for (int i = 0; i < CGR__LIB_N; i++)
		cgr__strfree(&ctx->arena, cfg->path[i]);
	cgr__free(&ctx->arena, cfg, sizeof(*cfg), 16);
}

int cgr__lib_configure(cgr_ctx *ctx, const char *const paths[CGR__LIB_N])
{
	struct libcfg *cfg;
	void *p;
	int ret;

	for (int i = 0; i < CGR__LIB_N; i++)
		if (paths[i] != NULL)
			break;
		else if (i == CGR__LIB_N - 1)
			return 0; /* nothing to record */
	ret = cgr__ctx_state(ctx, &cgr__lib_key, cfg_make, cfg_fini, &p);
	if (ret < 0)
		return ret;
	cfg = p;
	for (int i = 0; i < CGR__LIB_N; i++) {
		if (paths[i] == NULL)
			continue;
		cfg->path[i] = cgr__strdup(&ctx->arena, paths[i]);
		if (cfg->path[i] == NULL)
			return -ENOMEM; /* freed with the context */
	}
	return 0;
}

const char *cgr__lib_asked(cgr_ctx *ctx, int kind)
{
	/* No lock: a backend asks from inside the make() of its own state.
	 * The paths were recorded before the context was handed out. */
	struct libcfg *cfg = cgr__ctx_state_get(ctx, &cgr__lib_key);

	if (cfg == NULL || kind < 0 || kind >= CGR__LIB_N)
		return NULL;
	return cfg->path[kind];
}

void *cgr__lib_open(cgr_ctx *ctx, int kind, const char *what,
		    const char *const *names, size_t n, const char *sonames,
		    char *path, size_t plen, char *why, size_t wlen)
{
	const char *asked = cgr__lib_asked(ctx, kind);
	const char *tried = asked;
	struct link_map *lm = NULL;
	const char *err = NULL;
	void *h = NULL;

	if (asked != NULL) {
		h = dlopen(asked, RTLD_NOW | RTLD_LOCAL);
		err = h == NULL ? dlerror() : NULL;
	}
	for (size_t i = 0; h == NULL && asked == NULL && i < n; i++) {
		h = dlopen(tried = names[i], RTLD_NOW | RTLD_LOCAL);
		if (h == NULL && err == NULL)
			err = dlerror(); /* the first name's reason */
	}
	if (h == NULL) {
		snprintf(why, wlen, "%s (%s) could not be loaded: %s", what,
			 asked != NULL ? asked : sonames,
			 err != NULL ? err : "no such file");
		return NULL;
	}
	if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm != NULL &&
	    lm->l_name != NULL && *lm->l_name)
		tried = lm->l_name;
	snprintf(path, plen, "%s", tried);
	return h;
}

