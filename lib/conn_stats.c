/* lib/conn_stats.c: a connection's counters (rcp_conn_get_stats), read
 * without stopping traffic: each field is an atomic of its own, so each is
 * exact and the set is not one snapshot; and what the cluster layer reads
 * of a connection's state (healthy, outstanding requests, last error). */
#include <stdatomic.h>
#include <stdio.h>

#include "conn_int.h"

int rcp_conn_get_stats(rcp_conn *c, rcp_conn_stats *o)
{
    if (!c || !o)
        return RCP_ERR_INVALID;
#define S(x) o->x = atomic_load_explicit(&c->st.x, memory_order_relaxed)
    S(requests);
    S(replies);
    S(batches);
    S(commands_written);
    S(write_calls);
    S(read_calls);
    S(bytes_out);
    S(bytes_in);
    S(timeouts);
    S(late_replies);
    S(reconnects);
    S(disconnects);
    S(fast_path);
    S(futex_wakes);
    S(loop_wakes);
    S(caller_writes);
    S(leads);
    S(caller_replies);
    S(loop_leads);
    S(corked);
    S(sendfile_bytes);
    S(caller_uploads);
    S(spare_requests);
#undef S
    rcp__conn_spares_stats(c, o);
    return RCP_OK;
}

void rcp_conn_stats_add(rcp_conn_stats *sum, const rcp_conn_stats *add)
{
    if (!sum || !add)
        return;
#define A(x) sum->x += add->x
    A(requests);
    A(replies);
    A(batches);
    A(commands_written);
    A(write_calls);
    A(read_calls);
    A(bytes_out);
    A(bytes_in);
    A(timeouts);
    A(late_replies);
    A(reconnects);
    A(disconnects);
    A(fast_path);
    A(futex_wakes);
    A(loop_wakes);
    A(caller_writes);
    A(leads);
    A(caller_replies);
    A(loop_leads);
    A(corked);
    A(sendfile_bytes);
    A(caller_uploads);
    A(spare_requests);
#undef A
}

int rcp__conn_healthy(struct rcp_conn *c)
{
    return __atomic_load_n(&c->state, __ATOMIC_RELAXED) == RCP__ST_READY;
}

uint64_t rcp__conn_outstanding(struct rcp_conn *c)
{
    uint64_t n;
    rcp__mutex_lock(&c->mu);
    n = c->tail - c->head;
    rcp__mutex_unlock(&c->mu);
    return n;
}

void rcp__conn_last_error(struct rcp_conn *c, char *buf, size_t len)
{
    rcp__mutex_lock(&c->mu);
    if (c->last_err[0])
        snprintf(buf, len, "%s", c->last_err);
    else
        snprintf(buf, len, "%s: no failure recorded", c->addr);
    rcp__mutex_unlock(&c->mu);
}
