/*
 * compile/create.c: the last pass: what the programs use beyond memory.
 * Communicators (the user's, or one per member set and use), an event per
 * slot for each stream task, and each worker's streams: the communication
 * streams its collectives run on (sim streams) and the compute stream of
 * its stream tasks (on the worker's device).  Skipped when only planning.
 */
#include <errno.h>
#include <string.h>

#include "compile/compile.h"

/* Whether collectives t and u may share a communicator made at compile:
 * the same members and backend, and the same use (collectives, or device
 * edges from one root: the overlap pass puts each use on one stream per
 * member). */
static bool same_use(const struct cgr__cc *cc, const struct cgr__task *t,
		     const struct cgr__task *u)
{
	return u->nmembers == t->nmembers &&
	       memcmp(u->members, t->members,
		      t->nmembers * sizeof(*t->members)) == 0 &&
	       cc->nccl[u->id] == cc->nccl[t->id] && u->edge == t->edge &&
	       (!t->edge || u->cp.root == t->cp.root);
}

/* A communicator for collective t's members: in a graph with process
 * workers or workers on other hosts, a CPU one whose shared state is in
 * the graph's segment (every process makes it in the same order, so at
 * the same offset; the driver sets it up); NCCL's, of this process's
 * threads (process workers take no NCCL collective, and one with
 * members on another host runs there: create_comms). */
static int make_comm(struct cgr__cc *cc, struct cgr__task *t, cgr_comm **out)
{
	struct cgr_compiled *c = cc->c;
	struct cgr__comm_shm shm;

	if (c->seg == NULL || cc->nccl[t->id])
		return cgr_comm_create(c->ctx, t->members, t->nmembers,
				       cc->nccl[t->id] ? CGR_BACKEND_NCCL :
							 CGR_BACKEND_CPU,
				       out);
	shm.mem = cgr__c_salloc(c, cgr__cpu_shared_size((int)t->nmembers));
	shm.seg = c->seg->shm.addr;
	shm.seg_size = c->seg->attach ? c->seg->shm.size : c->seg->reserve;
	shm.attach = c->seg->attach;
	if (shm.mem == NULL)
		return -ENOMEM;
	return cgr__comm_create_shared(c->ctx, t->members, t->nmembers, &shm,
				       out);
}

/* The communicator collective t uses: the user's, or one made for its
 * member set and use. */
static int coll_comm(struct cgr__cc *cc, struct cgr__task *t, cgr_comm **out)
{
	struct cgr_compiled *c = cc->c;
	cgr_comm *comm = t->cp.comm;
	int ret;

	for (size_t i = 0; comm == NULL && i < c->ncomms; i++)
		if (same_use(cc, t, cc->comm_owner[i]))
			comm = c->comms[i];
	if (comm == NULL) {
		ret = make_comm(cc, t, &comm);
		if (ret < 0)
			cgr__graph_fail(cc->g, ret,
					"%s %s: its communicator could not be "
					"made (%s)",
					cgr__coll_name(t->coll), t->name,
					cgr_strerror(ret));
		if (ret < 0)
			return ret;
		cc->comm_owner[c->ncomms] = t;
		c->comms[c->ncomms++] = comm;
	}
	*out = comm;
	for (size_t i = 0; i < c->nused_comms; i++)
		if (c->used_comms[i] == comm)
			return 0;
	c->used_comms[c->nused_comms++] = comm;
	return 0;
}

static int create_comms(struct cgr__cc *cc)
{
	struct cgr_compiled *c = cc->c;
	size_t n = cc->ntasks + 1;
	int ret;

	c->comms = cgr__c_alloc(c, n * sizeof(cgr_comm *));
	c->used_comms = cgr__c_alloc(c, n * sizeof(cgr_comm *));
	cc->comm_owner = cgr__c_alloc(c, n * sizeof(struct cgr__task *));
	if (c->comms == NULL || c->used_comms == NULL || cc->comm_owner == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < c->nprogs; i++)
		for (size_t k = 0; k < c->progs[i].nops; k++) {
			struct cgr__coll_rt *cr = c->progs[i].ops[k].coll;
			if (c->progs[i].ops[k].kind != CGR__OP_COLL ||
			    (cr->spans && !cr->far))
				continue; /* across hosts: no communicator */
			if (cr->nccl && c->progs[i].w->host != c->ctx->host)
				continue; /* NCCL's ranks of another host */
			ret = coll_comm(cc, cc->by_id[cr->task_id], &cr->comm);
			if (ret < 0)
				return ret;
		}
	return 0;
}

/* The streams program p uses (compute: stream tasks; communication:
 * async CPU collectives). */
static void streams_used(const struct cgr__prog *p, bool *used)
{
	for (size_t k = 0; k < p->ntcs; k++)
		used[CGR__S_COMP] |= p->tcs[k].stream;
	for (size_t k = 0; k < p->nops; k++)
		if (p->ops[k].kind == CGR__OP_COLL && p->ops[k].coll->async &&
		    !p->ops[k].coll->nccl)
			used[p->ops[k].coll->sclass] = true;
}

/* Tracing: each used stream's trace buffer, for every program (a worker
 * process's are shared with the driver, so all are made everywhere, in
 * one order). */
static int create_traces(struct cgr_compiled *c, struct cgr__prog *p)
{
	bool used[CGR__NSTREAMS_ALL] = { false };

	streams_used(p, used);
	for (int s = 0; p->trace_cap > 0 && s < CGR__NSTREAMS_ALL; s++)
		if (used[s] &&
		    (p->strace[s] = cgr__tbuf_new(c, p->trace_cap)) == NULL)
			return -ENOMEM;
	return 0;
}

/* The streams program p uses and its stream tasks' events. */
static int create_streams(struct cgr_compiled *c, struct cgr__prog *p)
{
	bool used[CGR__NSTREAMS_ALL] = { false };
	int ret;

	streams_used(p, used);
	for (int s = 0; s < CGR__NSTREAMS_ALL; s++) {
		int dev = CGR_DEVICE_SIM;
		if (!used[s])
			continue;
		if (s == CGR__S_COMP && p->w->device >= 0)
			dev = p->w->device; /* the worker's device */
		ret = cgr_stream_create(c->ctx, dev, 0, &p->streams[s]);
		if (ret < 0)
			return ret;
	}
	for (size_t k = 0; k < p->nops; k++)
		if (p->ops[k].kind == CGR__OP_COLL && p->ops[k].coll->async &&
		    !p->ops[k].coll->nccl) {
			p->ops[k].coll->s = p->streams[p->ops[k].coll->sclass];
			p->hcap[p->ops[k].coll->sclass]++;
		}
	for (int s = 0; s < CGR__NSTREAMS; s++)
		if (p->hcap[s] > 0 &&
		    (p->held[s] = cgr__c_alloc(c, p->hcap[s] *
						      sizeof(*p->held[s]))) ==
			    NULL)
			return -ENOMEM;
	for (size_t k = 0; k < p->ntcs; k++) {
		struct cgr_task_ctx *tc = &p->tcs[k];
		tc->s = p->streams[CGR__S_COMP];
		for (uint32_t q = 0; tc->stream && q < c->nslots; q++)
			if ((ret = cgr_event_create(c->ctx, &tc->ev[q])) < 0)
				return ret;
	}
	return 0;
}

/* Device slots of device ports. */
static int create_device_ports(struct cgr_compiled *c)
{
	int ret;

	for (size_t i = 0; i < c->nports; i++) {
		struct cgr__port *p = &c->ports[i];
		void *m;
		if (p->dev < 0)
			continue;
		ret = cgr__c_dalloc(c, p->dev, p->cap * p->nbufs, &m);
		if (ret < 0)
			return ret;
		p->dmem = m;
		p->ddev = c->ddevs[c->ndallocs - 1]; /* the compile's ref */
	}
	return 0;
}

/* The streams of program p's NCCL collectives (CUDA streams on its
 * worker's device, one per kind), their events, device buckets. */
static int create_nccl(struct cgr_compiled *c, struct cgr__prog *p)
{
	uint32_t nnccl = 0;
	int ret;

	for (size_t k = 0; k < p->nops; k++)
		nnccl += p->ops[k].kind == CGR__OP_COLL &&
			  p->ops[k].coll->nccl;
	if (nnccl > 0) {
		/* Every NCCL collective goes through the queue (with overlap
		 * off the thread waits for each); nslots jobs per collective
		 * at most (issue waits for the slot's previous run). */
		p->lq_cap = nnccl * c->nslots;
		p->lq = cgr__c_alloc(c, p->lq_cap * sizeof(*p->lq));
		if (p->lq == NULL)
			return -ENOMEM;
	}

	for (size_t k = 0; k < p->nops; k++) {
		struct cgr__coll_rt *cr = p->ops[k].coll;
		void *bi, *bo;
		if (p->ops[k].kind != CGR__OP_COLL || !cr->nccl)
			continue;
		if (p->nstreams[cr->cstream] == NULL &&
		    (ret = cgr_stream_create(c->ctx, p->w->device, 0,
					     &p->nstreams[cr->cstream])) < 0)
			return ret;
		cr->s = p->nstreams[cr->cstream];
		if (cr->far && p->far_s == NULL &&
		    (ret = cgr_stream_create(c->ctx, CGR_DEVICE_SIM, 0,
					     &p->far_s)) < 0)
			return ret;
		for (uint32_t q = 0; q < c->nslots; q++)
			if ((ret = cgr_event_create(c->ctx,
						    &cr->jobs[q].ev)) < 0)
				return ret;
		/* Static shapes: what a member whose input changed sends
		 * (a scatter's root sends n results). */
		size_t nres = cr->kind == CGR_COLL_SCATTER ? (size_t)cr->n : 1;
		if (cr->late != NULL &&
		    (ret = cgr__c_dalloc(c, p->w->device, cr->cap * nres,
					 &cr->dscratch)) < 0)
			return ret;
		if (cr->k == 1)
			continue; /* no bucket (a list's is CPU only) */
		ret = cgr__c_dalloc(c, p->w->device, cr->k * cr->cap, &bi);
		if (ret == 0)
			ret = cgr__c_dalloc(c, p->w->device,
					    cr->k * cr->cap *
						    (cr->kind == CGR_COLL_ALLGATHER ?
							     (size_t)cr->n :
							     1),
					    &bo);
		if (ret < 0)
			return ret;
		cr->bucket_in = bi;
		cr->bucket_out = bo;
	}
	return 0;
}

int cgr__create(struct cgr__cc *cc)
{
	struct cgr_compiled *c = cc->c;
	int ret = create_comms(cc);

	if (ret == 0)
		ret = create_device_ports(c);
	for (size_t i = 0; ret == 0 && i < c->nprogs; i++)
		ret = create_traces(c, &c->progs[i]);
	/* A program that runs elsewhere (its worker not shared) has its
	 * streams made there. */
	for (size_t i = 0; ret == 0 && i < c->nprogs; i++)
		if (c->progs[i].w->ops->shared)
			ret = create_streams(c, &c->progs[i]);
	for (size_t i = 0; ret == 0 && i < c->nprogs; i++)
		if (c->progs[i].w->ops->shared)
			ret = create_nccl(c, &c->progs[i]);
	for (size_t i = 0; i < c->nprogs; i++) {
		struct cgr__prog *p = &c->progs[i];
		c->ngated += p->gate; /* from the plan */
		for (size_t t = 0; t < p->ntcs; t++)
			p->watch |= p->tcs[t].stream;
	}
	return ret;
}
