/*
 * net/ucx.c: messages between hosts over UCX active messages (net.h).
 * One UCP context and worker, host transports only (what UCX_TLS allows,
 * the CUDA ones left out by the caller's configuration), an endpoint per
 * peer with peer error handling, one AM handler queueing what arrives
 * (eager messages copied at once, rendezvous ones received into their
 * own buffer).  libucp.so.0 is loaded at run time.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/dl.h"
#include "net/net.h"

#ifndef HAVE_UCX

int cgr__ucx_open(struct cgr__ucx **out, uint32_t npeers, char *why,
		  size_t len)
{
	(void)out, (void)npeers;
	snprintf(why, len, "this build has no UCX support (ucp/api/ucp.h)");
	return -ENOSYS;
}

int cgr__ucx_address(struct cgr__ucx *u, const void **addr, size_t *len)
{
	(void)u, (void)addr, (void)len;
	return -ENOSYS;
}

const char *cgr__ucx_transports(const struct cgr__ucx *u)
{
	(void)u;
	return "";
}

int cgr__ucx_connect(struct cgr__ucx *u, uint32_t peer, const void *addr,
		     size_t len, char *why, size_t wlen)
{
	(void)u, (void)peer, (void)addr, (void)len, (void)why, (void)wlen;
	return -ENOSYS;
}

int cgr__ucx_send(struct cgr__ucx *u, uint32_t peer, uint32_t from,
		  const void *data, size_t len, int64_t timeout_ns)
{
	(void)u, (void)peer, (void)from, (void)data, (void)len;
	(void)timeout_ns;
	return -ENOSYS;
}

int cgr__ucx_recv(struct cgr__ucx *u, uint32_t *from, void *buf, size_t cap,
		  size_t *len, int64_t timeout_ns)
{
	(void)u, (void)from, (void)buf, (void)cap, (void)len, (void)timeout_ns;
	return -ENOSYS;
}

void cgr__ucx_close(struct cgr__ucx *u)
{
	(void)u;
}

void cgr__ucx_set_handler(struct cgr__ucx *u, cgr__ucx_fn fn,
			  cgr__ucx_lost_fn lost, void *arg)
{
	(void)u, (void)fn, (void)lost, (void)arg;
}

int cgr__ucx_fetch(struct cgr__ucx *u, void *rndv, void *buf, size_t len,
		   cgr__ucx_done_fn done, void *arg)
{
	(void)u, (void)rndv, (void)buf, (void)len, (void)done, (void)arg;
	return -ENOSYS;
}

void cgr__ucx_drop_data(struct cgr__ucx *u, void *rndv)
{
	(void)u, (void)rndv;
}

int cgr__ucx_post(struct cgr__ucx *u, uint32_t peer, const void *hdr,
		  size_t hlen, const void *data, size_t len,
		  cgr__ucx_done_fn done, void *arg)
{
	(void)u, (void)peer, (void)hdr, (void)hlen, (void)data, (void)len;
	(void)done, (void)arg;
	return -ENOSYS;
}

unsigned cgr__ucx_progress(struct cgr__ucx *u)
{
	(void)u;
	return 0;
}

int cgr__ucx_efd(struct cgr__ucx *u)
{
	(void)u;
	return -ENOSYS;
}

int cgr__ucx_arm(struct cgr__ucx *u)
{
	(void)u;
	return -ENOSYS;
}

bool cgr__ucx_peer_lost(const struct cgr__ucx *u, uint32_t peer)
{
	(void)u, (void)peer;
	return true;
}

void cgr__ucx_peer_close(struct cgr__ucx *u, uint32_t peer, const char *why)
{
	(void)u, (void)peer, (void)why;
}

size_t cgr__ucx_max_hdr(const struct cgr__ucx *u)
{
	(void)u;
	return 0;
}

size_t cgr__ucx_inflight(const struct cgr__ucx *u)
{
	(void)u;
	return 0;
}

#else

#include <ucp/api/ucp.h>

#define AM_ID 7

struct api {
	ucs_status_t (*config_read)(const char *, const char *,
				    ucp_config_t **);
	void (*config_release)(ucp_config_t *);
	ucs_status_t (*init_version)(unsigned, unsigned,
				     const ucp_params_t *, const ucp_config_t *,
				     ucp_context_h *);
	void (*cleanup)(ucp_context_h);
	ucs_status_t (*worker_create)(ucp_context_h,
				      const ucp_worker_params_t *,
				      ucp_worker_h *);
	void (*worker_destroy)(ucp_worker_h);
	ucs_status_t (*worker_get_address)(ucp_worker_h, ucp_address_t **,
					   size_t *);
	void (*worker_release_address)(ucp_worker_h, ucp_address_t *);
	ucs_status_t (*ep_create)(ucp_worker_h, const ucp_ep_params_t *,
				  ucp_ep_h *);
	ucs_status_ptr_t (*ep_close_nbx)(ucp_ep_h, const ucp_request_param_t *);
	ucs_status_t (*set_am_recv_handler)(ucp_worker_h,
					    const ucp_am_handler_param_t *);
	ucs_status_ptr_t (*am_send_nbx)(ucp_ep_h, unsigned, const void *,
					size_t, const void *, size_t,
					const ucp_request_param_t *);
	ucs_status_ptr_t (*am_recv_data_nbx)(ucp_worker_h, void *, void *,
					     size_t,
					     const ucp_request_param_t *);
	void (*am_data_release)(ucp_worker_h, void *);
	unsigned (*worker_progress)(ucp_worker_h);
	ucs_status_t (*request_check_status)(void *);
	void (*request_free)(void *);
	const char *(*status_string)(ucs_status_t);
	void (*config_print)(const ucp_config_t *, FILE *, const char *,
			     ucs_config_print_flags_t);
	ucs_status_t (*config_modify)(ucp_config_t *, const char *,
				      const char *);
	void (*context_print_info)(const ucp_context_h, FILE *);
	ucs_status_t (*worker_get_efd)(ucp_worker_h, int *);
	ucs_status_t (*worker_arm)(ucp_worker_h);
	ucs_status_t (*worker_query)(ucp_worker_h, ucp_worker_attr_t *);
};

#define SYM(field, name) { #name, offsetof(struct api, field), false }
static const struct cgr__lib_sym syms[] = {
	SYM(config_read, ucp_config_read),
	SYM(config_release, ucp_config_release),
	SYM(init_version, ucp_init_version),
	SYM(cleanup, ucp_cleanup),
	SYM(worker_create, ucp_worker_create),
	SYM(worker_destroy, ucp_worker_destroy),
	SYM(worker_get_address, ucp_worker_get_address),
	SYM(worker_release_address, ucp_worker_release_address),
	SYM(ep_create, ucp_ep_create),
	SYM(ep_close_nbx, ucp_ep_close_nbx),
	SYM(set_am_recv_handler, ucp_worker_set_am_recv_handler),
	SYM(am_send_nbx, ucp_am_send_nbx),
	SYM(am_recv_data_nbx, ucp_am_recv_data_nbx),
	SYM(am_data_release, ucp_am_data_release),
	SYM(worker_progress, ucp_worker_progress),
	SYM(request_check_status, ucp_request_check_status),
	SYM(request_free, ucp_request_free),
	SYM(status_string, ucs_status_string),
	SYM(config_print, ucp_config_print),
	SYM(config_modify, ucp_config_modify),
	SYM(context_print_info, ucp_context_print_info),
	SYM(worker_get_efd, ucp_worker_get_efd),
	SYM(worker_arm, ucp_worker_arm),
	SYM(worker_query, ucp_worker_query),
};
#undef SYM

/* A message that arrived (or, rendezvous, is arriving: done false). */
struct msg {
	struct msg *next;
	struct cgr__ucx *u;
	uint32_t from;
	bool done;
	ucs_status_t status;
	size_t len;
	unsigned char data[];
};

struct cgr__ucx {
	struct api f;
	void *lib;
	ucp_context_h ctx;
	ucp_worker_h w;
	ucp_address_t *addr;
	size_t addr_len;
	ucp_ep_h *eps;
	bool *lost; /* per peer: its endpoint failed */
	uint32_t npeers;
	struct msg *head, **tail;
	char transports[512]; /* what was chosen and left out (net.h) */
	/* Handler mode (net.h): the caller's handlers; the records of sends
	 * in flight (their headers must outlive the call: UCX 1.13 does
	 * not copy them), free ones kept for the next; what is in flight. */
	cgr__ucx_fn fn;
	cgr__ucx_lost_fn lost_fn;
	void *fn_arg;
	struct sendrec *free_recs;
	size_t inflight;
	int efd;
	size_t max_hdr; /* the largest AM header the worker sends */
};

/* A send in flight (handler mode), or a fetch's completion. */
struct sendrec {
	struct sendrec *next;
	struct cgr__ucx *u;
	cgr__ucx_done_fn done;
	void *arg;
	unsigned char hdr[CGR__UCX_HDR_MAX];
};

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int fail(struct cgr__ucx *u, int err, ucs_status_t st,
		const char *what, char *why, size_t len)
{
	snprintf(why, len, "%s: %s", what, u->f.status_string(st));
	return err;
}

static void queue(struct cgr__ucx *u, struct msg *m)
{
	m->next = NULL;
	*u->tail = m;
	u->tail = &m->next;
}

/* A rendezvous message's data is in (its request freed here: one freed
 * before it completes would never call back). */
static void rndv_done(void *req, ucs_status_t st, size_t len, void *arg)
{
	struct msg *m = arg;

	(void)len;
	m->status = st;
	m->done = true;
	m->u->f.request_free(req);
}

/* The AM handler: eager data copied now; rendezvous data received into
 * the message's own buffer. */
static ucs_status_t on_am(void *arg, const void *hdr, size_t hlen, void *data,
			  size_t len, const ucp_am_recv_param_t *p)
{
	struct cgr__ucx *u = arg;
	struct msg *m;
	ucp_request_param_t rp;
	ucs_status_ptr_t r;

	if (u->fn != NULL) {
		struct cgr__ucx_msg um = { hdr, hlen, data, len, NULL };
		if (p->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)
			um.rndv = data, um.data = NULL;
		u->fn(u->fn_arg, &um);
		return UCS_OK;
	}
	m = malloc(sizeof(*m) + (len ? len : 1));
	if (m == NULL || hlen != sizeof(uint32_t)) {
		free(m);
		return UCS_OK; /* dropped: the sender sees its data lost */
	}
	memcpy(&m->from, hdr, sizeof(m->from));
	m->u = u;
	m->len = len;
	m->status = UCS_OK;
	m->done = true;
	queue(u, m);
	if (!(p->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
		memcpy(m->data, data, len);
		return UCS_OK;
	}
	m->done = false;
	memset(&rp, 0, sizeof(rp));
	rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
			  UCP_OP_ATTR_FIELD_USER_DATA;
	rp.cb.recv_am = rndv_done;
	rp.user_data = m;
	r = u->f.am_recv_data_nbx(u->w, data, m->data, len, &rp);
	if (UCS_PTR_IS_ERR(r)) {
		m->status = UCS_PTR_STATUS(r);
		m->done = true;
	} else if (r == NULL) {
		m->done = true; /* completed in place: no callback */
	}
	return UCS_OK;
}

/* What f prints into a string (malloc'd; NULL if out of memory). */
static char *print_to(void (*f)(struct cgr__ucx *, const void *, FILE *),
		      struct cgr__ucx *u, const void *arg)
{
	char *buf = NULL;
	size_t n = 0;
	FILE *m = open_memstream(&buf, &n);

	if (m == NULL)
		return NULL;
	f(u, arg, m);
	fclose(m);
	return buf;
}

static void print_config(struct cgr__ucx *u, const void *cfg, FILE *m)
{
	u->f.config_print(cfg, m, NULL, UCS_CONFIG_PRINT_CONFIG);
}

static void print_context(struct cgr__ucx *u, const void *ctx, FILE *m)
{
	(void)ctx;
	u->f.context_print_info(u->ctx, m);
}

/* Whether transport name t (n bytes) moves device memory. */
static bool device_tl(const char *t, size_t n)
{
	static const char *const dev[] = { "cuda", "gdr", "rocm" };

	for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
		if (n >= strlen(dev[i]) && !strncmp(t, dev[i], strlen(dev[i])))
			return true;
	return false;
}

/* Whether transport name t (n bytes) is within one host only (shared
 * memory, loopback to itself): UCX gives those no peer failure handling,
 * which the links need. */
static bool local_tl(const char *t, size_t n)
{
	static const char *const loc[] = { "self", "sm",   "shm",  "mm",
					   "posix", "sysv", "cma", "knem",
					   "xpmem" };

	for (size_t i = 0; i < sizeof(loc) / sizeof(loc[0]); i++) {
		size_t k = strlen(loc[i]);
		if (n >= k && !strncmp(t, loc[i], k) && (n == k || t[k] == ':'))
			return true;
	}
	return false;
}

/*
 * The control context moves host memory only: the transports UCX_TLS
 * names (cfg's TLS) without the device ones (cuda_copy, cuda_ipc,
 * gdr_copy, rocm_*), set back into cfg.  An exclusion list ("^...") or
 * "all" is left as it is unless `strict` (then the device transports are
 * added to what it excludes; UCX warns about excluding what it does not
 * have, so only once the context showed one).  u->transports says what
 * was asked and left out.  0, or -EINVAL when nothing would be left.
 */
static int host_tls(struct cgr__ucx *u, ucp_config_t *cfg, bool strict,
		    char *why, size_t len)
{
	char *all = print_to(print_config, u, cfg), *v, *e;
	char keep[320] = "", out[320] = "", want[256];
	size_t kn = 0, on = 0;

	if (all == NULL)
		return -ENOMEM;
	v = strstr(all, "UCX_TLS=");
	snprintf(want, sizeof(want), "%s", v != NULL ? v + 8 : "all");
	free(all);
	if ((e = strchr(want, '\n')) != NULL)
		*e = 0;
	if ((want[0] == '^' || !strcmp(want, "all")) && !strict) {
		snprintf(u->transports, sizeof(u->transports), "UCX_TLS=%s",
			 want);
		return 0;
	}
	if (want[0] == '^' || !strcmp(want, "all")) {
		snprintf(keep, sizeof(keep), "^%s%scuda,gdr_copy,rocm",
			 want[0] == '^' ? want + 1 : "",
			 want[0] == '^' && want[1] ? "," : "");
		snprintf(out, sizeof(out), "cuda, gdr_copy, rocm");
	} else {
		bool net = false;
		for (char *t = strtok_r(want, ",", &e); t != NULL;
		     t = strtok_r(NULL, ",", &e)) {
			bool dev = device_tl(t, strlen(t));
			net |= !dev && !local_tl(t, strlen(t));
			char *d = dev ? out : keep;
			size_t *dn = dev ? &on : &kn;
			*dn += (size_t)snprintf(d + *dn, sizeof(keep) - *dn,
						"%s%s", *dn ? "," : "", t);
			if (*dn >= sizeof(keep))
				*dn = sizeof(keep) - 1;
		}
		if (keep[0] != 0 && !net) {
			snprintf(why, len,
				 "UCX_TLS=%s names no network transport: the "
				 "links need one with peer failure handling "
				 "(tcp, rc, ud, dc), which shared memory and "
				 "self lack",
				 keep);
			return -EINVAL;
		}
	}
	if (keep[0] == 0) {
		snprintf(why, len,
			 "UCX_TLS names only device transports (%s): the "
			 "control context moves host memory",
			 out);
		return -EINVAL;
	}
	if (u->f.config_modify(cfg, "TLS", keep) != UCS_OK) {
		snprintf(why, len, "UCX refuses TLS=%s", keep);
		return -EINVAL;
	}
	snprintf(u->transports, sizeof(u->transports), "UCX_TLS=%s%s%s%s",
		 keep, out[0] ? " (left out: " : "", out, out[0] ? ")" : "");
	return 0;
}

/* The resources the context chose ("tcp/eth0 self/memory0 ..."), added
 * to u->transports: whether one of them is a device transport. */
static bool chosen(struct cgr__ucx *u, bool *net)
{
	char *info = print_to(print_context, u, NULL), *p;
	size_t n = strlen(u->transports);
	bool dev = false;

	*net = false;
	n += (size_t)snprintf(u->transports + n, sizeof(u->transports) - n,
			      "; resources:");
	for (p = info; p != NULL && (p = strstr(p, "flags -- ")) != NULL;) {
		char *e = strchr(p += 9, '\n');
		size_t l = e != NULL ? (size_t)(e - p) : strlen(p);
		const char *sl = memchr(p, '/', l);
		dev |= device_tl(p, l);
		*net |= !device_tl(p, l) &&
			!local_tl(p, sl != NULL ? (size_t)(sl - p) : l);
		if (n < sizeof(u->transports))
			n += (size_t)snprintf(u->transports + n,
					      sizeof(u->transports) - n, " %.*s",
					      (int)l, p);
	}
	free(info);
	return dev;
}

/* The context and worker over cfg, host transports only (see host_tls):
 * UCS_OK or why not. */
static ucs_status_t make_context(struct cgr__ucx *u, ucp_config_t *cfg,
				 int *err, char *why, size_t len)
{
	ucp_params_t pp;
	ucs_status_t st;
	bool net, dev;

	memset(&pp, 0, sizeof(pp));
	pp.field_mask = UCP_PARAM_FIELD_FEATURES;
	pp.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
	for (int strict = 0; strict < 2; strict++) {
		if ((*err = host_tls(u, cfg, strict, why, len)) < 0)
			return UCS_ERR_INVALID_PARAM;
		st = u->f.init_version(UCP_API_MAJOR, UCP_API_MINOR, &pp, cfg,
				       &u->ctx);
		if (st != UCS_OK)
			return st;
		dev = chosen(u, &net);
		if (!dev && !net) {
			/* As "UCX_TLS=^tcp" leaves it: no peer failure
			 * handling, every endpoint would fail. */
			snprintf(why, len,
				 "UCX chose no network transport (%s): the "
				 "links need one with peer failure handling "
				 "(tcp, rc, ud, dc)",
				 u->transports);
			*err = -EINVAL;
			u->f.cleanup(u->ctx);
			u->ctx = NULL;
			return UCS_ERR_INVALID_PARAM;
		}
		if (!dev)
			return st;
		/* A device transport came with "all" or "^...": again,
		 * excluding them. */
		u->f.cleanup(u->ctx);
		u->ctx = NULL;
	}
	return UCS_ERR_INVALID_PARAM;
}

static void on_ep_error(void *arg, ucp_ep_h ep, ucs_status_t st)
{
	struct cgr__ucx *u = arg;

	for (uint32_t i = 0; i < u->npeers; i++)
		if (u->eps[i] == ep && !u->lost[i]) {
			u->lost[i] = true;
			if (u->lost_fn != NULL)
				u->lost_fn(u->fn_arg, i,
					   u->f.status_string(st));
		}
}

/* libucp loaded and its functions in u->f: 0 or -ENOENT. */
static int load(struct cgr__ucx *u, char *why, size_t len)
{
	u->lib = dlopen("libucp.so.0", RTLD_NOW | RTLD_GLOBAL);
	if (u->lib == NULL) {
		snprintf(why, len, "cannot load libucp.so.0: %s", dlerror());
		return -ENOENT;
	}
	return cgr__lib_resolve(u->lib, "libucp.so.0", &u->f, syms,
				sizeof(syms) / sizeof(syms[0]), why, len) < 0 ?
		       -ENOENT :
		       0;
}

/* The context (host transports), the worker, its address and the AM
 * handler: 0, -EINVAL (make_context) or -EIO. */
static int start(struct cgr__ucx *u, char *why, size_t len)
{
	ucp_config_t *cfg = NULL;
	ucp_worker_params_t wp;
	ucp_am_handler_param_t ap;
	int ret = 0;
	ucs_status_t st = u->f.config_read(NULL, NULL, &cfg);

	if (st != UCS_OK)
		return fail(u, -EIO, st, "ucp_config_read", why, len);
	st = make_context(u, cfg, &ret, why, len);
	u->f.config_release(cfg);
	if (ret < 0)
		return ret;
	if (st == UCS_OK) {
		memset(&wp, 0, sizeof(wp));
		wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
		/* One thread at a time, not always the same one: the
		 * caller serializes (remote/link.c). */
		wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
		st = u->f.worker_create(u->ctx, &wp, &u->w);
	}
	if (st == UCS_OK)
		st = u->f.worker_get_address(u->w, &u->addr, &u->addr_len);
	if (st == UCS_OK) {
		ucp_worker_attr_t wa;
		memset(&wa, 0, sizeof(wa));
		wa.field_mask = UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER;
		u->max_hdr = u->f.worker_query(u->w, &wa) == UCS_OK &&
					     wa.max_am_header < CGR__UCX_HDR_MAX ?
				     wa.max_am_header :
				     CGR__UCX_HDR_MAX;
	}
	if (st == UCS_OK) {
		memset(&ap, 0, sizeof(ap));
		ap.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
				UCP_AM_HANDLER_PARAM_FIELD_CB |
				UCP_AM_HANDLER_PARAM_FIELD_ARG;
		ap.id = AM_ID;
		ap.cb = on_am;
		ap.arg = u;
		st = u->f.set_am_recv_handler(u->w, &ap);
	}
	return st == UCS_OK ? 0 :
			      fail(u, -EIO, st, "creating the UCP worker", why,
				   len);
}

int cgr__ucx_open(struct cgr__ucx **out, uint32_t npeers, char *why,
		  size_t len)
{
	struct cgr__ucx *u = calloc(1, sizeof(*u));
	int ret = -ENOMEM;

	if (u == NULL)
		return -ENOMEM;
	u->tail = &u->head;
	u->npeers = npeers;
	u->efd = -1;
	u->eps = calloc(npeers + 1, sizeof(*u->eps));
	u->lost = calloc(npeers + 1, sizeof(*u->lost));
	if (u->eps != NULL && u->lost != NULL && (ret = load(u, why, len)) == 0)
		ret = start(u, why, len);
	if (ret < 0) {
		cgr__ucx_close(u);
		return ret;
	}
	*out = u;
	return 0;
}

int cgr__ucx_address(struct cgr__ucx *u, const void **addr, size_t *len)
{
	*addr = u->addr;
	*len = u->addr_len;
	return 0;
}

const char *cgr__ucx_transports(const struct cgr__ucx *u)
{
	return u->transports;
}

int cgr__ucx_connect(struct cgr__ucx *u, uint32_t peer, const void *addr,
		     size_t len, char *why, size_t wlen)
{
	ucp_ep_params_t ep;
	ucs_status_t st;

	(void)len;
	if (peer >= u->npeers || u->eps[peer] != NULL)
		return -EINVAL;
	memset(&ep, 0, sizeof(ep));
	ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
			UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
			UCP_EP_PARAM_FIELD_ERR_HANDLER;
	ep.address = addr;
	ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
	ep.err_handler.cb = on_ep_error;
	ep.err_handler.arg = u;
	st = u->f.ep_create(u->w, &ep, &u->eps[peer]);
	return st == UCS_OK ? 0 :
			      fail(u, -EIO, st, "ucp_ep_create", why, wlen);
}

/* Progresses r (a request, NULL or an error) to its end: its status;
 * UCS_ERR_TIMED_OUT past deadline. */
static ucs_status_t wait_req(struct cgr__ucx *u, ucs_status_ptr_t r,
			     int64_t deadline)
{
	ucs_status_t st;

	if (r == NULL)
		return UCS_OK;
	if (UCS_PTR_IS_ERR(r))
		return UCS_PTR_STATUS(r);
	while ((st = u->f.request_check_status(r)) == UCS_INPROGRESS) {
		u->f.worker_progress(u->w);
		if (now_ns() > deadline) {
			st = UCS_ERR_TIMED_OUT;
			break;
		}
	}
	u->f.request_free(r);
	return st;
}

int cgr__ucx_send(struct cgr__ucx *u, uint32_t peer, uint32_t from,
		  const void *data, size_t len, int64_t timeout_ns)
{
	ucp_request_param_t rp;
	ucs_status_t st;

	if (peer >= u->npeers || u->eps[peer] == NULL)
		return -EINVAL;
	if (u->lost[peer])
		return -ECONNRESET;
	memset(&rp, 0, sizeof(rp));
	st = wait_req(u,
		      u->f.am_send_nbx(u->eps[peer], AM_ID, &from,
				       sizeof(from), data, len, &rp),
		      now_ns() + timeout_ns);
	if (st == UCS_ERR_TIMED_OUT)
		return -ETIMEDOUT;
	return st == UCS_OK ? 0 : -EIO;
}

int cgr__ucx_recv(struct cgr__ucx *u, uint32_t *from, void *buf, size_t cap,
		  size_t *len, int64_t timeout_ns)
{
	int64_t deadline = now_ns() + timeout_ns;
	struct msg *m;
	int ret = 0;

	while (u->head == NULL || !u->head->done) {
		u->f.worker_progress(u->w);
		if (now_ns() > deadline)
			return -ETIMEDOUT;
	}
	m = u->head;
	u->head = m->next;
	if (u->head == NULL)
		u->tail = &u->head;
	if (m->status != UCS_OK)
		ret = -EIO;
	else if (m->len > cap)
		ret = -EMSGSIZE;
	else
		memcpy(buf, m->data, m->len);
	*from = m->from;
	*len = m->len;
	free(m);
	return ret;
}

void cgr__ucx_close(struct cgr__ucx *u)
{
	if (u == NULL)
		return;
	for (uint32_t i = 0; u->ctx != NULL && i < u->npeers; i++)
		if (u->eps[i] != NULL) {
			ucp_request_param_t rp;
			memset(&rp, 0, sizeof(rp));
			rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
			rp.flags = u->lost[i] ? UCP_EP_CLOSE_FLAG_FORCE : 0;
			(void)wait_req(u, u->f.ep_close_nbx(u->eps[i], &rp),
				       now_ns() + 1000000000);
		}
	while (u->head != NULL) {
		struct msg *m = u->head;
		u->head = m->next;
		free(m);
	}
	/* Sends in flight complete (in error) as their endpoints close;
	 * progress until they did, a second at most. */
	for (int64_t end = now_ns() + 1000000000;
	     u->w != NULL && u->inflight > 0 && now_ns() < end;)
		u->f.worker_progress(u->w);
	while (u->free_recs != NULL) {
		struct sendrec *r = u->free_recs;
		u->free_recs = r->next;
		free(r);
	}
	if (u->addr != NULL)
		u->f.worker_release_address(u->w, u->addr);
	if (u->w != NULL)
		u->f.worker_destroy(u->w);
	if (u->ctx != NULL)
		u->f.cleanup(u->ctx);
	free(u->eps);
	free(u->lost);
	free(u);
}

/* ---- handler mode ---------------------------------------------------- */

void cgr__ucx_set_handler(struct cgr__ucx *u, cgr__ucx_fn fn,
			  cgr__ucx_lost_fn lost, void *arg)
{
	u->fn = fn;
	u->lost_fn = lost;
	u->fn_arg = arg;
}

static struct sendrec *rec_get(struct cgr__ucx *u)
{
	struct sendrec *r = u->free_recs;

	if (r != NULL)
		u->free_recs = r->next;
	else if ((r = malloc(sizeof(*r))) == NULL)
		return NULL;
	r->u = u;
	return r;
}

static void rec_put(struct sendrec *r)
{
	r->next = r->u->free_recs;
	r->u->free_recs = r;
}

static int status_errno(ucs_status_t st)
{
	return st == UCS_OK		     ? 0 :
	       st == UCS_ERR_CANCELED	     ? -ECANCELED :
	       st == UCS_ERR_CONNECTION_RESET ||
		       st == UCS_ERR_ENDPOINT_TIMEOUT ||
		       st == UCS_ERR_UNREACHABLE ? -ECONNRESET :
						   -EIO;
}

/* A request ended: its record's done, the request and the record freed
 * (here: one freed before it completes would never call back). */
static void rec_end(void *req, ucs_status_t st, struct sendrec *r)
{
	struct cgr__ucx *u = r->u;

	u->inflight--;
	u->f.request_free(req);
	if (r->done != NULL)
		r->done(r->arg, status_errno(st));
	rec_put(r);
}

static void send_done(void *req, ucs_status_t st, void *arg)
{
	rec_end(req, st, arg);
}

static void fetch_done(void *req, ucs_status_t st, size_t len, void *arg)
{
	(void)len;
	rec_end(req, st, arg);
}

/* What a nonblocking call returned: 0 (done), 1 (in flight: r kept until
 * its callback) or the error (r back to the pool). */
static int posted(struct cgr__ucx *u, ucs_status_ptr_t q, struct sendrec *r)
{
	if (q == NULL) {
		rec_put(r);
		return 0;
	}
	if (UCS_PTR_IS_ERR(q)) {
		rec_put(r);
		return status_errno(UCS_PTR_STATUS(q));
	}
	u->inflight++;
	return 1;
}

int cgr__ucx_fetch(struct cgr__ucx *u, void *rndv, void *buf, size_t len,
		   cgr__ucx_done_fn done, void *arg)
{
	struct sendrec *r = rec_get(u);
	ucp_request_param_t rp;

	if (r == NULL) {
		u->f.am_data_release(u->w, rndv);
		return -ENOMEM;
	}
	r->done = done;
	r->arg = arg;
	memset(&rp, 0, sizeof(rp));
	rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
			  UCP_OP_ATTR_FIELD_USER_DATA;
	rp.cb.recv_am = fetch_done;
	rp.user_data = r;
	return posted(u, u->f.am_recv_data_nbx(u->w, rndv, buf, len, &rp), r);
}

void cgr__ucx_drop_data(struct cgr__ucx *u, void *rndv)
{
	u->f.am_data_release(u->w, rndv);
}

int cgr__ucx_post(struct cgr__ucx *u, uint32_t peer, const void *hdr,
		  size_t hlen, const void *data, size_t len,
		  cgr__ucx_done_fn done, void *arg)
{
	struct sendrec *r;
	ucp_request_param_t rp;

	if (peer >= u->npeers || hlen > u->max_hdr)
		return -EINVAL;
	if (u->lost[peer])
		return -ECONNRESET;
	if (u->eps[peer] == NULL)
		return -EINVAL;
	if ((r = rec_get(u)) == NULL)
		return -ENOMEM;
	memcpy(r->hdr, hdr, hlen);
	r->done = done;
	r->arg = arg;
	memset(&rp, 0, sizeof(rp));
	rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
			  UCP_OP_ATTR_FIELD_USER_DATA;
	rp.cb.send = send_done;
	rp.user_data = r;
	return posted(u,
		      u->f.am_send_nbx(u->eps[peer], AM_ID, r->hdr, hlen, data,
				       len, &rp),
		      r);
}

unsigned cgr__ucx_progress(struct cgr__ucx *u)
{
	return u->f.worker_progress(u->w);
}

int cgr__ucx_efd(struct cgr__ucx *u)
{
	if (u->efd < 0 && u->f.worker_get_efd(u->w, &u->efd) != UCS_OK)
		u->efd = -1;
	return u->efd >= 0 ? u->efd : -EIO;
}

int cgr__ucx_arm(struct cgr__ucx *u)
{
	ucs_status_t st = u->f.worker_arm(u->w);

	return st == UCS_OK ? 0 : st == UCS_ERR_BUSY ? -EAGAIN : -EIO;
}

bool cgr__ucx_peer_lost(const struct cgr__ucx *u, uint32_t peer)
{
	return peer >= u->npeers || u->lost[peer];
}

void cgr__ucx_peer_close(struct cgr__ucx *u, uint32_t peer, const char *why)
{
	ucp_request_param_t rp;
	ucs_status_ptr_t q;

	if (peer >= u->npeers || u->eps[peer] == NULL)
		return;
	if (!u->lost[peer]) {
		u->lost[peer] = true;
		if (u->lost_fn != NULL)
			u->lost_fn(u->fn_arg, peer, why);
	}
	memset(&rp, 0, sizeof(rp));
	rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
	rp.flags = UCP_EP_CLOSE_FLAG_FORCE;
	q = u->f.ep_close_nbx(u->eps[peer], &rp);
	u->eps[peer] = NULL;
	/* A forced close completes without the peer; progress until it
	 * did (its sends in flight end in error on the way). */
	(void)wait_req(u, q, now_ns() + 1000000000);
}

size_t cgr__ucx_max_hdr(const struct cgr__ucx *u)
{
	return u->max_hdr;
}

size_t cgr__ucx_inflight(const struct cgr__ucx *u)
{
	return u->inflight;
}

#endif
