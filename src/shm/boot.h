/*
 * shm/boot.h: the rendezvous of a context with its worker processes.
 *
 * The context listens on an abstract Unix address (nothing in the file
 * system, gone with the socket); each worker process connects and says
 * hello with its rank; once every rank has arrived each gets a welcome,
 * and the connected sockets (SOCK_SEQPACKET) carry the rest: segments
 * (shm.h's hand-off), then control.  Every message starts with a magic
 * and a protocol version, and nothing a peer sends is trusted: a message
 * of the wrong size, a bad magic or version, a rank out of range or taken
 * twice fails the whole rendezvous with -EPROTO and a reason (also sent
 * to the peer that caused it), as does a rank that never arrives by the
 * deadline (-ETIMEDOUT, naming the ranks missing); either way every
 * socket is closed, nothing half-built is left.
 *
 * Who uses it: proc/proc.c starts each process worker with a rendezvous
 * of one (accept_child) and proc/agent.c joins it; tests/shm-boot.c
 * covers the rest.  Threads: one rendezvous
 * from one thread.
 */
#ifndef CGR_SHM_BOOT_H
#define CGR_SHM_BOOT_H

#include <stddef.h>
#include <stdint.h>

#define CGR__BOOT_MAGIC 0x42524743u /* "CGRB" */
#define CGR__BOOT_VERSION 1
#define CGR__BOOT_MAX_RANKS 64
#define CGR__BOOT_ADDR_LEN 64

enum cgr__boot_type {
	CGR__BOOT_HELLO = 1,   /* worker -> context: rank, pid */
	CGR__BOOT_WELCOME = 2, /* context -> worker: rank, nranks */
	CGR__BOOT_REFUSE = 3,  /* context -> worker: why */
};

struct cgr__boot_msg {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	int32_t rank;
	int32_t nranks; /* WELCOME */
	int64_t pid;	/* HELLO */
	char why[200];	/* REFUSE */
};

struct cgr__boot {
	int lsock;			/* the listening socket, or -1 */
	int nranks;
	char addr[CGR__BOOT_ADDR_LEN]; /* what workers connect to */
	int socks[CGR__BOOT_MAX_RANKS]; /* by rank, -1 until it arrives */
	int64_t pids[CGR__BOOT_MAX_RANKS];
	int abort_fd; /* readable: give up (accept_child), or -1 */
};

/* Listens for nranks (1..CGR__BOOT_MAX_RANKS) workers; b->addr is their
 * address (a printable name: pass it on the worker's command line).
 * Returns 0 or a negative errno. */
int cgr__boot_listen(struct cgr__boot *b, int nranks);
/* The same at a given address (a printable name, under 64 bytes): a
 * process started by something else joins there.  -EADDRINUSE if another
 * listens on it. */
int cgr__boot_listen_at(struct cgr__boot *b, int nranks, const char *addr);

/*
 * Takes the workers' hellos until every rank arrived or the absolute
 * deadline, then welcomes them all: b->socks[r] is rank r's connection
 * (the caller owns them), b->pids[r] its pid.  On failure (-EPROTO,
 * -ETIMEDOUT, or another negative errno) why says what and who, and every
 * connection is closed.  The listening socket is closed either way.
 */
int cgr__boot_accept(struct cgr__boot *b, int64_t deadline, char *why,
		     size_t len);

/* The same for one worker process this process started (pidfd: it, pid
 * its pid): one that exits before it joins fails the rendezvous at once
 * (-ECHILD), and a connection from any other process (SO_PEERCRED) is
 * refused (-EPROTO). */
int cgr__boot_accept_child(struct cgr__boot *b, int pidfd, int64_t pid,
			   int64_t deadline, char *why, size_t len);

/* Closes the listening socket and every connection b still holds. */
void cgr__boot_close(struct cgr__boot *b);

/*
 * A worker's side: connects to addr (again and again while nobody listens
 * there yet), says hello as rank and waits for the welcome, by the
 * absolute deadline.  Returns the connected socket (>= 0;
 * *nranks set), or -EPROTO with the context's reason in why, -ETIMEDOUT,
 * -ECONNREFUSED (nobody listens), or another negative errno.
 */
int cgr__boot_join(const char *addr, int rank, int64_t deadline, int *nranks,
		   char *why, size_t len);

#endif
