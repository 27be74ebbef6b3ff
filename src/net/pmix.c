/*
 * net/pmix.c: the bootstrap through PMIx (net.h), libpmix loaded at run
 * time.  Values travel as PMIx byte objects under the caller's keys.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/dl.h"
#include "net/net.h"

#ifndef HAVE_PMIX

int cgr__boot_init(struct cgr__boot *b, char *why, size_t len)
{
	(void)b;
	snprintf(why, len, "this build has no PMIx support (pmix.h)");
	return -ENOSYS;
}

int cgr__boot_put(struct cgr__boot *b, const char *key, const void *data,
		  size_t len, char *why, size_t wlen)
{
	(void)b, (void)key, (void)data, (void)len, (void)why, (void)wlen;
	return -ENOSYS;
}

int cgr__boot_fence(struct cgr__boot *b, int timeout_s, char *why,
		    size_t wlen)
{
	(void)b, (void)timeout_s, (void)why, (void)wlen;
	return -ENOSYS;
}

int cgr__boot_get(struct cgr__boot *b, uint32_t rank, const char *key,
		  void *buf, size_t cap, size_t *len, char *why, size_t wlen)
{
	(void)b, (void)rank, (void)key, (void)buf, (void)cap, (void)len;
	(void)why, (void)wlen;
	return -ENOSYS;
}

int cgr__boot_publish(struct cgr__boot *b, const char *key, const void *data,
		      size_t len, char *why, size_t wlen)
{
	return cgr__boot_put(b, key, data, len, why, wlen);
}

int cgr__boot_get_late(struct cgr__boot *b, uint32_t rank, const char *key,
		       void *buf, size_t cap, size_t *len, int timeout_s,
		       char *why, size_t wlen)
{
	(void)timeout_s;
	return cgr__boot_get(b, rank, key, buf, cap, len, why, wlen);
}

int cgr__boot_host(struct cgr__boot *b, uint32_t rank, char *buf, size_t cap,
		   char *why, size_t wlen)
{
	(void)b, (void)rank, (void)buf, (void)cap, (void)why, (void)wlen;
	return -ENOSYS;
}

int cgr__boot_fini(struct cgr__boot *b, int64_t bound_ns, void (*late)(void))
{
	(void)b, (void)bound_ns, (void)late;
	return 0;
}

#else

#include <pmix.h>

#ifndef PMIX_GET_REFRESH_CACHE /* (PMIx 4.1) */
#define PMIX_GET_REFRESH_CACHE "pmix.get.refresh"
#endif

/* The functions of libpmix used here (pmix.h's prototypes). */
struct api {
	pmix_status_t (*init)(pmix_proc_t *, pmix_info_t *, size_t);
	pmix_status_t (*finalize)(const pmix_info_t *, size_t);
	pmix_status_t (*put)(pmix_scope_t, const pmix_key_t, pmix_value_t *);
	pmix_status_t (*commit)(void);
	pmix_status_t (*fence)(const pmix_proc_t *, size_t,
			       const pmix_info_t *, size_t);
	pmix_status_t (*get)(const pmix_proc_t *, const pmix_key_t,
			     const pmix_info_t *, size_t, pmix_value_t **);
	const char *(*error_string)(pmix_status_t);
	void (*value_destruct)(pmix_value_t *);
	pmix_status_t (*info_load)(pmix_info_t *, const char *, const void *,
				   pmix_data_type_t);
};

#define SYM(field, name) { #name, offsetof(struct api, field), false }
static const struct cgr__lib_sym syms[] = {
	SYM(init, PMIx_Init),		  SYM(finalize, PMIx_Finalize),
	SYM(put, PMIx_Put),		  SYM(commit, PMIx_Commit),
	SYM(fence, PMIx_Fence),		  SYM(get, PMIx_Get),
	SYM(error_string, PMIx_Error_string),
	SYM(value_destruct, PMIx_Value_destruct),
	SYM(info_load, PMIx_Info_load),
};
#undef SYM

_Static_assert(sizeof(struct api) <= sizeof(((struct cgr__boot *)0)->fns),
	       "the table fits struct cgr__boot");
_Static_assert(sizeof(pmix_proc_t) <= sizeof(((struct cgr__boot *)0)->me),
	       "pmix_proc_t fits struct cgr__boot");
_Static_assert(sizeof(pmix_nspace_t) <= sizeof(((struct cgr__boot *)0)->nspace),
	       "a PMIx namespace fits struct cgr__boot");

static const struct api *api(const struct cgr__boot *b)
{
	return (const struct api *)(const void *)b->fns;
}

static pmix_proc_t *self(struct cgr__boot *b)
{
	return (pmix_proc_t *)(void *)b->me;
}

/* rank's name in this job. */
static void peer(struct cgr__boot *b, uint32_t rank, pmix_proc_t *p)
{
	memset(p, 0, sizeof(*p));
	memcpy(p->nspace, self(b)->nspace, sizeof(p->nspace));
	p->rank = rank;
}

static int fail(struct cgr__boot *b, int err, pmix_status_t rc,
		const char *what, char *why, size_t len)
{
	snprintf(why, len, "%s: %s (%d)", what, api(b)->error_string(rc), rc);
	return err;
}

int cgr__boot_init(struct cgr__boot *b, char *why, size_t len)
{
	struct api *fns = (struct api *)(void *)b->fns;
	pmix_value_t *v = NULL;
	pmix_proc_t any;
	pmix_status_t rc;

	memset(b, 0, sizeof(*b));
	/* A PMIx launcher names each process in its environment (PMIx_Init
	 * reads it): without, there is no job to join, and libpmix is not
	 * even loaded (its PMIx_Init would fail, keeping a few bytes). */
	if (getenv("PMIX_NAMESPACE") == NULL && getenv("PMIX_RANK") == NULL) {
		snprintf(why, len, "not started by a PMIx launcher (neither "
				   "PMIX_NAMESPACE nor PMIX_RANK is set)");
		return -ENODEV;
	}
	b->lib = dlopen("libpmix.so.2", RTLD_NOW | RTLD_GLOBAL);
	if (b->lib == NULL) {
		snprintf(why, len, "cannot load libpmix.so.2: %s", dlerror());
		return -ENOENT;
	}
	if (cgr__lib_resolve(b->lib, "libpmix.so.2", fns, syms,
			     sizeof(syms) / sizeof(syms[0]), why, len) < 0)
		return -ENOENT;
	b->ready = true;
	rc = fns->init(self(b), NULL, 0);
	if (rc != PMIX_SUCCESS) {
		b->ready = false;
		/* A launcher started it (its variables are set) but its
		 * PMIx cannot be reached: not a job of one (every rank
		 * would drive its own). */
		return fail(b, -EIO, rc,
			    "PMIx_Init (PMIX_NAMESPACE or PMIX_RANK is set, "
			    "but the launcher's PMIx server cannot be "
			    "reached)",
			    why, len);
	}
	b->rank = self(b)->rank;
	memcpy(b->nspace, self(b)->nspace, sizeof(pmix_nspace_t));
	peer(b, PMIX_RANK_WILDCARD, &any);
	rc = fns->get(&any, PMIX_JOB_SIZE, NULL, 0, &v);
	if (rc != PMIX_SUCCESS || v == NULL || v->type != PMIX_UINT32) {
		if (v != NULL) {
			fns->value_destruct(v);
			free(v);
		}
		fns->finalize(NULL, 0);
		b->ready = false;
		return fail(b, -EIO, rc, "PMIx_Get(PMIX_JOB_SIZE)", why, len);
	}
	b->size = v->data.uint32;
	fns->value_destruct(v);
	free(v);
	return 0;
}

int cgr__boot_put(struct cgr__boot *b, const char *key, const void *data,
		  size_t len, char *why, size_t wlen)
{
	pmix_value_t v;
	pmix_key_t k;
	pmix_status_t rc;

	if (strlen(key) >= CGR__BOOT_KEY_MAX || strlen(key) >= sizeof(k))
		return -EINVAL;
	snprintf(k, sizeof(k), "%s", key);
	memset(&v, 0, sizeof(v));
	v.type = PMIX_BYTE_OBJECT;
	v.data.bo.bytes = (char *)(uintptr_t)data; /* PMIx_Put copies it */
	v.data.bo.size = len;
	rc = api(b)->put(PMIX_GLOBAL, k, &v);
	return rc == PMIX_SUCCESS ? 0 : fail(b, -EIO, rc, "PMIx_Put", why, wlen);
}

int cgr__boot_fence(struct cgr__boot *b, int timeout_s, char *why,
		    size_t wlen)
{
	pmix_info_t info[2];
	bool collect = true;
	pmix_status_t rc = api(b)->commit();

	if (rc != PMIX_SUCCESS)
		return fail(b, -EIO, rc, "PMIx_Commit", why, wlen);
	memset(info, 0, sizeof(info));
	api(b)->info_load(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
	api(b)->info_load(&info[1], PMIX_TIMEOUT, &timeout_s, PMIX_INT);
	rc = api(b)->fence(NULL, 0, info, 2);
	if (rc == PMIX_ERR_TIMEOUT)
		return fail(b, -ETIMEDOUT, rc, "PMIx_Fence", why, wlen);
	return rc == PMIX_SUCCESS ? 0 :
				    fail(b, -EIO, rc, "PMIx_Fence", why, wlen);
}

/* cgr__boot_get with PMIx_Get's info (ninfo of them). */
static int get_with(struct cgr__boot *b, uint32_t rank, const char *key,
		    const pmix_info_t *info, size_t ninfo, void *buf,
		    size_t cap, size_t *len, char *why, size_t wlen)
{
	pmix_value_t *v = NULL;
	pmix_proc_t p;
	pmix_key_t k;
	pmix_status_t rc;
	int ret = 0;

	if (strlen(key) >= sizeof(k))
		return -EINVAL;
	snprintf(k, sizeof(k), "%s", key);
	peer(b, rank, &p);
	rc = api(b)->get(&p, k, info, ninfo, &v);
	if (rc == PMIX_ERR_NOT_FOUND)
		ret = -ENOENT;
	else if (rc != PMIX_SUCCESS || v == NULL)
		ret = fail(b, -EIO, rc, "PMIx_Get", why, wlen);
	else if (v->type != PMIX_BYTE_OBJECT)
		ret = -EIO;
	else if (v->data.bo.size > cap)
		ret = -EMSGSIZE;
	if (ret == 0) {
		memcpy(buf, v->data.bo.bytes, v->data.bo.size);
		*len = v->data.bo.size;
	}
	if (v != NULL) {
		api(b)->value_destruct(v);
		free(v);
	}
	return ret;
}

int cgr__boot_get(struct cgr__boot *b, uint32_t rank, const char *key,
		  void *buf, size_t cap, size_t *len, char *why, size_t wlen)
{
	return get_with(b, rank, key, NULL, 0, buf, cap, len, why, wlen);
}

int cgr__boot_publish(struct cgr__boot *b, const char *key, const void *data,
		      size_t len, char *why, size_t wlen)
{
	int ret = cgr__boot_put(b, key, data, len, why, wlen);
	pmix_status_t rc;

	if (ret < 0)
		return ret;
	rc = api(b)->commit();
	return rc == PMIX_SUCCESS ? 0 :
				    fail(b, -EIO, rc, "PMIx_Commit", why, wlen);
}

int cgr__boot_get_late(struct cgr__boot *b, uint32_t rank, const char *key,
		       void *buf, size_t cap, size_t *len, int timeout_s,
		       char *why, size_t wlen)
{
	pmix_info_t info[2];
	bool fresh = true;

	memset(info, 0, sizeof(info));
	api(b)->info_load(&info[0], PMIX_GET_REFRESH_CACHE, &fresh, PMIX_BOOL);
	api(b)->info_load(&info[1], PMIX_TIMEOUT, &timeout_s, PMIX_INT);
	return get_with(b, rank, key, info, 2, buf, cap, len, why, wlen);
}

int cgr__boot_host(struct cgr__boot *b, uint32_t rank, char *buf, size_t cap,
		   char *why, size_t wlen)
{
	pmix_value_t *v = NULL;
	pmix_proc_t p;
	pmix_status_t rc;
	int ret = 0;

	peer(b, rank, &p);
	rc = api(b)->get(&p, PMIX_HOSTNAME, NULL, 0, &v);
	if (rc != PMIX_SUCCESS || v == NULL || v->type != PMIX_STRING)
		ret = fail(b, -EIO, rc, "PMIx_Get(PMIX_HOSTNAME)", why, wlen);
	else
		snprintf(buf, cap, "%s", v->data.string);
	if (v != NULL) {
		api(b)->value_destruct(v);
		free(v);
	}
	return ret;
}

/* A bounded finalize: its thread and the waiter share it; the last of
 * the two frees it. */
struct fini {
	pmix_status_t (*finalize)(const pmix_info_t *, size_t);
	void (*late)(void);
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done, abandoned;
};

static void *fini_main(void *arg)
{
	struct fini *f = arg;
	bool abandoned;

	f->finalize(NULL, 0);
	pthread_mutex_lock(&f->lock);
	f->done = true;
	abandoned = f->abandoned;
	pthread_cond_signal(&f->cond);
	pthread_mutex_unlock(&f->lock);
	if (abandoned) {
		f->late();
		pthread_cond_destroy(&f->cond);
		pthread_mutex_destroy(&f->lock);
		free(f);
	}
	return NULL;
}

int cgr__boot_fini(struct cgr__boot *b, int64_t bound_ns, void (*late)(void))
{
	struct fini *f;
	pthread_condattr_t ca;
	pthread_attr_t ta;
	struct timespec ts;
	pthread_t t;
	int ret = 0;

	if (!b->ready)
		return 0;
	b->ready = false;
	if (bound_ns <= 0 || (f = calloc(1, sizeof(*f))) == NULL) {
		api(b)->finalize(NULL, 0);
		return 0;
	}
	f->finalize = api(b)->finalize;
	f->late = late;
	pthread_mutex_init(&f->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&f->cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_attr_init(&ta);
	pthread_attr_setdetachstate(&ta, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &ta, fini_main, f) != 0) {
		f->finalize(NULL, 0);
		f->done = true;
	}
	pthread_attr_destroy(&ta);
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += (time_t)(bound_ns / 1000000000);
	ts.tv_nsec += (long)(bound_ns % 1000000000);
	if (ts.tv_nsec >= 1000000000)
		ts.tv_sec++, ts.tv_nsec -= 1000000000;
	pthread_mutex_lock(&f->lock);
	while (!f->done &&
	       pthread_cond_timedwait(&f->cond, &f->lock, &ts) != ETIMEDOUT)
		;
	if (!f->done) {
		f->abandoned = true; /* its thread frees it */
		ret = -ETIMEDOUT;
	}
	pthread_mutex_unlock(&f->lock);
	if (ret == 0) {
		pthread_cond_destroy(&f->cond);
		pthread_mutex_destroy(&f->lock);
		free(f);
	}
	return ret;
}

#endif
