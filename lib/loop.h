/* lib/loop.h: an I/O loop thread (epoll + eventfd). Connections are
 * attached to one loop for life; the loop calls back into conn.c. */
#ifndef RCP_LOOP_H
#define RCP_LOOP_H

#include <stdint.h>

typedef struct rcp__loop rcp__loop;
struct rcp_conn;

/* Creates and starts a loop thread; NULL on failure. */
rcp__loop *rcp__loop_new(void);
/* Stops and joins the thread, frees the loop. No connection may remain. */
void rcp__loop_free(rcp__loop *l);

int rcp__loop_attach(rcp__loop *l, struct rcp_conn *c);
void rcp__loop_detach(rcp__loop *l, struct rcp_conn *c);

/* Watch fd for the connection (edge-triggered in and out). */
int rcp__loop_watch(rcp__loop *l, int fd, struct rcp_conn *c);
void rcp__loop_unwatch(rcp__loop *l, int fd);
/* armed 0: only peer hang-ups wake the loop (a lone caller reads the
 * replies itself); armed 1: readable and writable edges too. */
int rcp__loop_rearm(rcp__loop *l, int fd, struct rcp_conn *c, int armed);

/* Queue the connection for processing on the loop thread; writes the
 * eventfd only if the loop sleeps and nothing else was queued. Returns 1 if
 * an eventfd write was made. */
int rcp__loop_notify(rcp__loop *l, struct rcp_conn *c);

/* Returns once the loop has finished a full pass that began after the
 * call: anything queued for it before is done with. No-op on the loop's
 * own thread or a stopped loop. */
void rcp__loop_quiesce(rcp__loop *l);

/* 1 on a loop thread (any loop). */
int rcp__loop_on_thread(void);

/* Implemented by conn.c, called on the loop thread. */
void rcp__conn_process(struct rcp_conn *c, uint32_t events);
/* Runs due timers; returns the next time (ns) it wants to be called, or
 * UINT64_MAX. */
uint64_t rcp__conn_timers(struct rcp_conn *c, uint64_t now);
uint64_t rcp__conn_next_timer(struct rcp_conn *c);

#endif
