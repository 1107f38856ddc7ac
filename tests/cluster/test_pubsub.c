/* test_pubsub.c: the subscriber (rcpipe/pubsub.h) on a real cluster.
 *
 * - classic SUBSCRIBE/PSUBSCRIBE on one node get PUBLISH sent to every
 *   node (masters and replicas); UNSUBSCRIBE stops delivery; after the
 *   server kills the subscriber's connection, the channels are
 *   resubscribed by themselves (event) and get messages again.
 * - sharded channels in several slots while a subscribed slot is
 *   resharded to another master, with a publisher thread running through
 *   it: every SPUBLISH the server counted (it returns the number of
 *   subscribers that got the message, ours being the only one) reaches
 *   the callback; the moved channel's subscription follows the slot
 *   (RCP_EVENT_PUBSUB_RESUBSCRIBED names it and the new owner) and every
 *   SPUBLISH started after that event is counted and delivered; channels
 *   that did not move lose nothing.
 * - the same through a failover (the subscribed master SIGKILLed, its
 *   replica promoted): messages published before the kill all arrive;
 *   messages in flight when the node died may be lost (the dying node
 *   may answer the publisher and die before writing to the subscriber);
 *   every SPUBLISH started after the kill (once cluster.sh kill has seen
 *   the process gone) that was counted arrives; every SPUBLISH
 *   started after the resubscribe event is counted and arrives.
 *
 * The cluster runs with cluster-require-full-coverage no (the other
 * masters keep serving while one is down) and
 * cluster-allow-replica-migration no (an emptied master stays one). */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "rcpipe.h"
#include "rcpipe/pubsub.h"

#define NCH 4
#define MAXSEQ 6000

static rcpc_cluster cl;

/* ------------------------------------------------------------------ */
/* what the subscriber saw                                             */

struct chstate {
    char name[64];
    atomic_int next;                   /* next seq the publisher sends */
    int result[MAXSEQ];                /* SPUBLISH answer: -2 not sent, -1 error, else count */
    atomic_int recv[MAXSEQ];           /* times delivered */
    atomic_int resub_seq;              /* next at the resubscribe event naming it; -1: none */
    atomic_int interrupted;            /* INTERRUPTED events naming it */
    char resub_msg[512];               /* the event's message (under ev_lock) */
};

static struct chstate chs[NCH];
static int nch;
static atomic_int unknown_msgs;

static pthread_mutex_t ev_lock = PTHREAD_MUTEX_INITIALIZER;
static int classic_resubs; /* under ev_lock */
static atomic_int classic_msgs, pattern_msgs, news_after_unsub;

static void reset_state(void)
{
    int i, s;
    for (i = 0; i < NCH; i++) {
        chs[i].name[0] = '\0';
        atomic_store(&chs[i].next, 0);
        atomic_store(&chs[i].resub_seq, -1);
        atomic_store(&chs[i].interrupted, 0);
        chs[i].resub_msg[0] = '\0';
        for (s = 0; s < MAXSEQ; s++) {
            chs[i].result[s] = -2;
            atomic_store(&chs[i].recv[s], 0);
        }
    }
    nch = 0;
    atomic_store(&unknown_msgs, 0);
}

static void on_event(const rcp_event *ev, void *data)
{
    int i;
    (void)data;
    if (ev->type != RCP_EVENT_PUBSUB_RESUBSCRIBED && ev->type != RCP_EVENT_PUBSUB_INTERRUPTED)
        return;
    if (getenv("RCP_CL_EVENTS"))
        fprintf(stderr, "[%lld] pubsub event %d: %s\n", (long long)rcptest_now_ms(), ev->type,
                ev->message);
    pthread_mutex_lock(&ev_lock);
    if (ev->type == RCP_EVENT_PUBSUB_RESUBSCRIBED && strstr(ev->message, "channel 'news'") &&
        strncmp(ev->message, "sharded", 7) != 0)
        classic_resubs++;
    for (i = 0; i < nch; i++) {
        char quoted[80];
        snprintf(quoted, sizeof quoted, "'%.60s'", chs[i].name);
        if (!strstr(ev->message, quoted))
            continue;
        if (ev->type == RCP_EVENT_PUBSUB_INTERRUPTED) {
            atomic_fetch_add(&chs[i].interrupted, 1);
        } else {
            atomic_store(&chs[i].resub_seq, atomic_load(&chs[i].next));
            snprintf(chs[i].resub_msg, sizeof chs[i].resub_msg, "%s", ev->message);
        }
    }
    pthread_mutex_unlock(&ev_lock);
}

static void on_msg(const rcp_pubsub_msg *m, void *data)
{
    int i;
    (void)data;
    if (m->kind == RCP_PUBSUB_CHANNEL || m->kind == RCP_PUBSUB_PATTERN) {
        if (m->kind == RCP_PUBSUB_PATTERN) {
            if (m->pattern_len == 6 && memcmp(m->pattern, "news.*", 6) == 0)
                atomic_fetch_add(&pattern_msgs, 1);
            else
                atomic_fetch_add(&unknown_msgs, 1);
        } else if (m->channel_len == 4 && memcmp(m->channel, "news", 4) == 0) {
            atomic_fetch_add(&classic_msgs, 1);
            if (m->message_len >= 5 && memcmp(m->message, "after", 5) == 0)
                atomic_fetch_add(&news_after_unsub, 1);
        } else {
            atomic_fetch_add(&unknown_msgs, 1);
        }
        return;
    }
    for (i = 0; i < nch; i++) {
        if (m->channel_len == strlen(chs[i].name) &&
            memcmp(m->channel, chs[i].name, m->channel_len) == 0) {
            char buf[32];
            long seq;
            char *end;
            if (m->message_len == 0 || m->message_len >= sizeof buf)
                break;
            memcpy(buf, m->message, m->message_len);
            buf[m->message_len] = '\0';
            seq = strtol(buf, &end, 10);
            if (*end || seq < 0 || seq >= MAXSEQ)
                break;
            atomic_fetch_add(&chs[i].recv[seq], 1);
            return;
        }
    }
    atomic_fetch_add(&unknown_msgs, 1);
}

/* ------------------------------------------------------------------ */
/* helpers                                                             */

static rcp_cluster *open_handle(void)
{
    rcp_cluster_options o;
    rcp_conn_options node;
    rcpc_options(&o, &node, cl.seed);
    o.event_cb = on_event;
    return rcpc_open(&o);
}

static rcp_pubsub *open_ps(rcp_cluster *h, const char *classic)
{
    rcp_pubsub_options po;
    rcp_pubsub *ps = NULL;
    char err[512];
    int rc;
    rcp_pubsub_options_init(&po);
    po.msg_cb = on_msg;
    po.classic_node = classic;
    rc = rcp_pubsub_open(h, &po, &ps, err, sizeof err);
    ck_assert_msg(rc == RCP_OK && ps, "rcp_pubsub_open: %s (%s)", rcp_strerror(rc), err);
    return ps;
}

static int add_chan(unsigned slot, const char *what)
{
    int i = nch++;
    snprintf(chs[i].name, sizeof chs[i].name, "%s%s", rcpc_slot_tag(slot), what);
    ck_assert_uint_eq(rcp_keyslot(chs[i].name, strlen(chs[i].name)), slot);
    return i;
}

/* One SPUBLISH of the channel's next seq; records the answer. */
static void publish_one(rcp_cluster *h, int i)
{
    char msg[32];
    int seq = atomic_load(&chs[i].next);
    rcp_reply *r;
    if (seq >= MAXSEQ)
        return;
    snprintf(msg, sizeof msg, "%d", seq);
    atomic_store(&chs[i].next, seq + 1);
    r = rcp_cluster_command(h, "SPUBLISH %s %s", chs[i].name, msg);
    if (r && r->type == RCP_REPLY_INTEGER)
        chs[i].result[seq] = (int)r->integer;
    else
        chs[i].result[seq] = -1;
    rcp_reply_free(r);
}

struct publisher {
    pthread_t th;
    rcp_cluster *h;
    atomic_int stop;
};

static void *publisher_main(void *arg)
{
    struct publisher *p = arg;
    while (!atomic_load(&p->stop)) {
        int i;
        for (i = 0; i < nch; i++)
            publish_one(p->h, i);
        rcptest_sleep_ms(5);
    }
    return NULL;
}

/* How many of channel i's SPUBLISHes the server counted 0 or failed. */
static void tally(int i, int *uncounted, int *failed)
{
    int s, n = atomic_load(&chs[i].next);
    *uncounted = *failed = 0;
    for (s = 0; s < n; s++) {
        if (chs[i].result[s] == 0)
            (*uncounted)++;
        else if (chs[i].result[s] < 0)
            (*failed)++;
    }
}

/* Waits (bounded) until every counted message has arrived. */
static void wait_delivered(int timeout_ms)
{
    int64_t deadline = rcptest_now_ms() + timeout_ms;
    for (;;) {
        int i, s, missing = 0;
        for (i = 0; i < nch; i++) {
            int n = atomic_load(&chs[i].next);
            for (s = 0; s < n; s++)
                if (chs[i].result[s] >= 1 && atomic_load(&chs[i].recv[s]) == 0)
                    missing++;
        }
        if (missing == 0 || rcptest_now_ms() > deadline)
            return;
        rcptest_sleep_ms(20);
    }
}

/* Lets the publisher go on until 50 more messages of channel i follow its
 * resubscribe event, stops it, waits for the deliveries. */
static void finish_publishing(struct publisher *p, int i)
{
    int target = atomic_load(&chs[i].resub_seq) + 50;
    int64_t deadline = rcptest_now_ms() + rcptest_scale(20000);
    while (atomic_load(&chs[i].next) < target && rcptest_now_ms() < deadline)
        rcptest_sleep_ms(20);
    atomic_store(&p->stop, 1);
    pthread_join(p->th, NULL);
    wait_delivered(rcptest_scale(5000));
}

/* The rules every channel obeys; from_seq[i]: the first seq from which
 * "counted means delivered" must hold (0: all). */
static void check_channels(const int *from_seq, const char *phase)
{
    int i, s;
    ck_assert_msg(atomic_load(&unknown_msgs) == 0, "%s: %d unknown messages", phase,
                  atomic_load(&unknown_msgs));
    for (i = 0; i < nch; i++) {
        int n = atomic_load(&chs[i].next), counted = 0, lost = 0, first_lost = -1;
        ck_assert_msg(n < MAXSEQ, "%s: publisher ran out of sequence numbers", phase);
        for (s = 0; s < n; s++) {
            int got = atomic_load(&chs[i].recv[s]);
            ck_assert_msg(got <= 1, "%s: %s message %d delivered %d times", phase, chs[i].name, s,
                          got);
            ck_assert_msg(got == 0 || chs[i].result[s] != 0,
                          "%s: %s message %d delivered though the server counted no subscriber",
                          phase, chs[i].name, s);
            if (chs[i].result[s] >= 1) {
                counted++;
                if (got == 0 && s >= from_seq[i]) {
                    lost++;
                    if (first_lost < 0)
                        first_lost = s;
                }
            }
        }
        ck_assert_msg(lost == 0,
                      "%s: %s: %d of %d counted messages (from seq %d on) never arrived, first %d",
                      phase, chs[i].name, lost, counted, from_seq[i], first_lost);
    }
}

/* Every SPUBLISH of channel i started at or after seq `from` was counted
 * and arrived; there is at least one. */
static void check_after(int i, int from, const char *phase)
{
    int n = atomic_load(&chs[i].next), s;
    ck_assert_msg(from >= 0 && n > from, "%s: %s: nothing published after seq %d (next %d)",
                  phase, chs[i].name, from, n);
    for (s = from; s < n; s++)
        ck_assert_msg(chs[i].result[s] == 1 && atomic_load(&chs[i].recv[s]) == 1,
                      "%s: %s message %d (after the resubscribe at %d): SPUBLISH %d, delivered %d",
                      phase, chs[i].name, s, from, chs[i].result[s],
                      atomic_load(&chs[i].recv[s]));
}

/* Waits until the resubscribe event for channel i names 127.0.0.1:port. */
static int wait_resub(int i, int port, int timeout_ms)
{
    char want[64];
    int64_t deadline = rcptest_now_ms() + timeout_ms;
    snprintf(want, sizeof want, "on 127.0.0.1:%d ", port);
    for (;;) {
        int ok;
        pthread_mutex_lock(&ev_lock);
        ok = atomic_load(&chs[i].resub_seq) >= 0 && strstr(chs[i].resub_msg, want) != NULL;
        pthread_mutex_unlock(&ev_lock);
        if (ok)
            return 0;
        if (rcptest_now_ms() > deadline)
            return -1;
        rcptest_sleep_ms(20);
    }
}

static int first_slot(const rcpc_node *n)
{
    unsigned s;
    for (s = 0; s < RCPC_SLOTS; s++)
        if (rcpc_has_slot(n, s))
            return (int)s;
    return -1;
}

/* The k-th slot (from 0) the node serves, or -1. */
static int nth_slot(const rcpc_node *n, int k)
{
    unsigned s;
    for (s = 0; s < RCPC_SLOTS; s++)
        if (rcpc_has_slot(n, s) && k-- == 0)
            return (int)s;
    return -1;
}

static int last_slot(const rcpc_node *n)
{
    int s;
    for (s = RCPC_SLOTS - 1; s >= 0; s--)
        if (rcpc_has_slot(n, (unsigned)s))
            return s;
    return -1;
}

/* ------------------------------------------------------------------ */
/* tests                                                               */

START_TEST(test_bad_arguments)
{
    rcp_cluster *h = open_handle();
    rcp_pubsub_options po;
    rcp_pubsub *ps = (rcp_pubsub *)&po;
    char err[256];

    rcp_pubsub_options_init(&po);
    ck_assert_int_eq(rcp_pubsub_open(h, &po, &ps, err, sizeof err), RCP_ERR_INVALID);
    ck_assert_ptr_null(ps);
    po.msg_cb = on_msg;
    po.classic_node = "nonsense";
    ck_assert_int_eq(rcp_pubsub_open(h, &po, &ps, err, sizeof err), RCP_ERR_INVALID);
    ck_assert_msg(strstr(err, "nonsense") != NULL, "%s", err);
    ck_assert_int_eq(rcp_pubsub_open(NULL, &po, &ps, err, sizeof err), RCP_ERR_INVALID);
    ck_assert_int_eq(rcp_pubsub_ssubscribe(NULL, "x", 1), RCP_ERR_INVALID);
    ps = open_ps(h, NULL);
    ck_assert_int_eq(rcp_pubsub_ssubscribe(ps, NULL, 3), RCP_ERR_INVALID);
    /* Unsubscribing what was never subscribed is fine. */
    ck_assert_int_eq(rcp_pubsub_sunsubscribe(ps, "never", 5), RCP_OK);
    rcp_pubsub_close(ps);
    rcp_pubsub_close(NULL);
    rcp_cluster_close(h);
}
END_TEST

START_TEST(test_classic_any_node)
{
    rcp_cluster *h;
    rcp_pubsub *ps;
    rcpc_topo t;
    rcpc_env env;
    char classic[64], err[4096];
    int i, m = -1, n = 0, resubs0;
    int64_t deadline;
    redisReply *rr;

    ck_assert_msg(rcpc_wait_ok(&cl, 30, err, sizeof err) == 0, "%s", err);
    reset_state();
    atomic_store(&classic_msgs, 0);
    atomic_store(&pattern_msgs, 0);
    atomic_store(&news_after_unsub, 0);
    ck_assert_int_eq(rcpc_topology_any(&cl, &t), 0);
    for (i = 0; i < t.n && m < 0; i++)
        if (t.node[i].is_master && t.node[i].nslots > 0)
            m = t.node[i].port;
    snprintf(classic, sizeof classic, "127.0.0.1:%d", m);
    h = open_handle();
    ps = open_ps(h, classic);
    ck_assert_int_eq(rcp_pubsub_subscribe(ps, "news", 4), RCP_OK);
    ck_assert_int_eq(rcp_pubsub_psubscribe(ps, "news.*", 6), RCP_OK);
    ck_assert_int_eq(rcp_pubsub_subscribe(ps, "news", 4), RCP_OK); /* again: fine */

    /* PUBLISH on every node, masters and replicas. */
    ck_assert_int_eq(rcpc_env_read(&cl, &env), 0);
    for (i = 0; i < env.n; i++) {
        if (env.pid[i] == 0)
            continue;
        rr = rcpc_ask(env.port[i], "PUBLISH news from-%d", env.port[i]);
        ck_assert_msg(rr && rr->type == REDIS_REPLY_INTEGER, "PUBLISH on %d", env.port[i]);
        freeReplyObject(rr);
        rr = rcpc_ask(env.port[i], "PUBLISH news.x from-%d", env.port[i]);
        ck_assert_msg(rr && rr->type == REDIS_REPLY_INTEGER, "PUBLISH on %d", env.port[i]);
        freeReplyObject(rr);
        n++;
    }
    ck_assert_int_ge(n, 6);
    deadline = rcptest_now_ms() + rcptest_scale(10000);
    while ((atomic_load(&classic_msgs) < n || atomic_load(&pattern_msgs) < n) &&
           rcptest_now_ms() < deadline)
        rcptest_sleep_ms(20);
    ck_assert_msg(atomic_load(&classic_msgs) == n && atomic_load(&pattern_msgs) == n,
                  "PUBLISH on %d nodes: %d channel and %d pattern messages arrived", n,
                  atomic_load(&classic_msgs), atomic_load(&pattern_msgs));
    ck_assert_int_eq(atomic_load(&unknown_msgs), 0);

    /* The server drops our connection: channels come back by themselves. */
    pthread_mutex_lock(&ev_lock);
    resubs0 = classic_resubs;
    pthread_mutex_unlock(&ev_lock);
    rr = rcpc_ask(m, "CLIENT KILL TYPE pubsub");
    ck_assert_msg(rr && rr->type == REDIS_REPLY_INTEGER && rr->integer >= 1,
                  "CLIENT KILL TYPE pubsub on %d killed nothing", m);
    freeReplyObject(rr);
    deadline = rcptest_now_ms() + rcptest_scale(10000);
    for (;;) {
        int got;
        pthread_mutex_lock(&ev_lock);
        got = classic_resubs > resubs0;
        pthread_mutex_unlock(&ev_lock);
        if (got)
            break;
        ck_assert_msg(rcptest_now_ms() < deadline,
                      "no resubscribe event for 'news' after the kill");
        rcptest_sleep_ms(20);
    }
    /* The pattern may be confirmed a moment after the channel. */
    deadline = rcptest_now_ms() + rcptest_scale(10000);
    for (;;) {
        rr = rcpc_ask(m, "PUBSUB NUMPAT");
        ck_assert_msg(rr && rr->type == REDIS_REPLY_INTEGER, "PUBSUB NUMPAT");
        i = (int)rr->integer;
        freeReplyObject(rr);
        if (i == 1)
            break;
        ck_assert_msg(rcptest_now_ms() < deadline, "pattern not resubscribed on %d", m);
        rcptest_sleep_ms(20);
    }
    rr = rcpc_ask(env.port[env.n - 1], "PUBLISH news again");
    freeReplyObject(rr);
    rr = rcpc_ask(env.port[env.n - 1], "PUBLISH news.y again");
    freeReplyObject(rr);
    deadline = rcptest_now_ms() + rcptest_scale(10000);
    while ((atomic_load(&classic_msgs) < n + 1 || atomic_load(&pattern_msgs) < n + 1) &&
           rcptest_now_ms() < deadline)
        rcptest_sleep_ms(20);
    ck_assert_msg(atomic_load(&classic_msgs) == n + 1 && atomic_load(&pattern_msgs) == n + 1,
                  "after the reconnect: %d channel and %d pattern messages (want %d)",
                  atomic_load(&classic_msgs), atomic_load(&pattern_msgs), n + 1);

    /* UNSUBSCRIBE: no more "news"; the pattern still gets "news.z",
     * published after "news" on the same node, so it arrives after it. */
    ck_assert_int_eq(rcp_pubsub_unsubscribe(ps, "news", 4), RCP_OK);
    rr = rcpc_ask(m, "PUBLISH news after");
    freeReplyObject(rr);
    rr = rcpc_ask(m, "PUBLISH news.z after");
    freeReplyObject(rr);
    deadline = rcptest_now_ms() + rcptest_scale(10000);
    while (atomic_load(&pattern_msgs) < n + 2 && rcptest_now_ms() < deadline)
        rcptest_sleep_ms(20);
    ck_assert_int_eq(atomic_load(&pattern_msgs), n + 2);
    ck_assert_int_eq(atomic_load(&news_after_unsub), 0);
    rcp_pubsub_close(ps);
    rcp_cluster_close(h);
}
END_TEST

START_TEST(test_ssubscribe_reshard)
{
    struct publisher pub;
    rcp_cluster *h;
    rcp_pubsub *ps;
    rcp_pubsub_stats st;
    rcpc_topo t, t2;
    char err[4096];
    int src = -1, dst = -1, other = -1, i, moved_slot, o, from[NCH] = {0};
    int cmoved, cstay, cdst, cother;

    ck_assert_msg(rcpc_wait_ok(&cl, 30, err, sizeof err) == 0, "%s", err);
    reset_state();
    ck_assert_int_eq(rcpc_topology_any(&cl, &t), 0);
    for (i = 0; i < t.n; i++) {
        if (!t.node[i].is_master || t.node[i].nslots < 10)
            continue;
        if (src < 0)
            src = i;
        else if (dst < 0)
            dst = i;
        else if (other < 0)
            other = i;
    }
    ck_assert_msg(src >= 0 && dst >= 0 && other >= 0, "need three masters with slots");
    /* redis-cli --cluster reshard moves the source's lowest slots first;
     * checked below against the real topology. */
    moved_slot = first_slot(&t.node[src]);
    cmoved = add_chan((unsigned)moved_slot, "moved");
    cstay = add_chan((unsigned)last_slot(&t.node[src]), "stays");
    cdst = add_chan((unsigned)nth_slot(&t.node[dst], 1), "dst");
    cother = add_chan((unsigned)last_slot(&t.node[other]), "other");

    h = open_handle();
    ps = open_ps(h, NULL);
    for (i = 0; i < nch; i++)
        ck_assert_int_eq(rcp_pubsub_ssubscribe(ps, chs[i].name, strlen(chs[i].name)), RCP_OK);
    /* Subscribed on the owner: the first SPUBLISH of each counts us. */
    for (i = 0; i < nch; i++) {
        publish_one(h, i);
        ck_assert_msg(chs[i].result[0] == 1, "%s: SPUBLISH counted %d subscribers", chs[i].name,
                      chs[i].result[0]);
    }

    pub.h = h;
    atomic_store(&pub.stop, 0);
    ck_assert_int_eq(pthread_create(&pub.th, NULL, publisher_main, &pub), 0);
    rcptest_sleep_ms(300);
    ck_assert_msg(rcpc_reshard(&cl, t.node[src].port, t.node[dst].port, 2, err, sizeof err) == 0,
                  "%s", err);
    ck_assert_int_eq(rcpc_topology(t.node[dst].port, &t2), 0);
    o = rcpc_slot_owner(&t2, (unsigned)moved_slot);
    ck_assert_msg(o >= 0 && t2.node[o].port == t.node[dst].port,
                  "slot %d did not move to %d (reshard moved other slots)", moved_slot,
                  t.node[dst].port);
    ck_assert_msg(wait_resub(cmoved, t.node[dst].port, rcptest_scale(15000)) == 0,
                  "no resubscribe event naming %s on %d (last: %s)", chs[cmoved].name,
                  t.node[dst].port, chs[cmoved].resub_msg);
    finish_publishing(&pub, cmoved);

    {
        int unc, fail;
        tally(cmoved, &unc, &fail);
        fprintf(stderr,
                "pubsub reshard: slot %d %d -> %d; %s: %d published (%d counted by nobody, %d "
                "failed), resubscribed at seq %d, interrupted %d time(s); %s\n",
                moved_slot, t.node[src].port, t.node[dst].port, chs[cmoved].name,
                atomic_load(&chs[cmoved].next), unc, fail, atomic_load(&chs[cmoved].resub_seq),
                atomic_load(&chs[cmoved].interrupted), chs[cmoved].resub_msg);
    }
    /* Counted means delivered, for every channel, the whole time: the old
     * owner writes every message it counted before its "sunsubscribe". */
    check_channels(from, "reshard");
    check_after(cmoved, atomic_load(&chs[cmoved].resub_seq), "reshard");
    ck_assert_int_ge(atomic_load(&chs[cmoved].interrupted), 1);
    /* The channels that did not move lost nothing at all. */
    for (i = 0; i < nch; i++) {
        if (i == cmoved)
            continue;
        ck_assert_int_eq(atomic_load(&chs[i].resub_seq), -1);
        check_after(i, 0, "reshard (channel not moved)");
    }
    (void)cstay;
    (void)cdst;
    (void)cother;
    ck_assert_int_eq(rcp_pubsub_get_stats(ps, &st), RCP_OK);
    ck_assert_int_ge((int)st.resubscribes, 1);

    /* SUNSUBSCRIBE: the server counts nobody any more. */
    ck_assert_int_eq(rcp_pubsub_sunsubscribe(ps, chs[cother].name, strlen(chs[cother].name)),
                     RCP_OK);
    {
        rcp_reply *r = rcp_cluster_command(h, "SPUBLISH %s x", chs[cother].name);
        ck_assert_msg(rcptest_is_int(r, 0), "SPUBLISH after SUNSUBSCRIBE counted a subscriber");
        rcp_reply_free(r);
    }
    rcp_pubsub_close(ps);
    rcp_cluster_close(h);
}
END_TEST

START_TEST(test_ssubscribe_failover)
{
    struct publisher pub;
    rcp_cluster *h;
    rcp_pubsub *ps;
    rcpc_topo t;
    char err[4096];
    int vm = -1, vr = -1, i, other = -1, cvictim, cother, cvictim2, from[NCH], kill_seq, dead_seq;

    ck_assert_msg(rcpc_wait_ok(&cl, 30, err, sizeof err) == 0, "%s", err);
    reset_state();
    ck_assert_int_eq(rcpc_topology_any(&cl, &t), 0);
    ck_assert_msg(rcpc_master_with_replica(&t, &vm, &vr) == 0, "no master with a replica");
    for (i = 0; i < t.n; i++)
        if (i != vm && t.node[i].is_master && t.node[i].nslots > 0)
            other = i;
    ck_assert_int_ge(other, 0);
    cvictim = add_chan((unsigned)nth_slot(&t.node[vm], 3), "victim");
    cvictim2 = add_chan((unsigned)last_slot(&t.node[vm]), "victim2");
    cother = add_chan((unsigned)first_slot(&t.node[other]), "survivor");

    h = open_handle();
    ps = open_ps(h, NULL);
    for (i = 0; i < nch; i++)
        ck_assert_int_eq(rcp_pubsub_ssubscribe(ps, chs[i].name, strlen(chs[i].name)), RCP_OK);
    ck_assert_msg(rcpc_wait_replicas_synced(&cl, rcptest_scale(15000)) == 0,
                  "replicas not in sync");
    /* Before: 30 rounds, all counted, all delivered. */
    for (i = 0; i < 30 * nch; i++)
        publish_one(h, i % nch);
    wait_delivered(rcptest_scale(5000));
    for (i = 0; i < nch; i++)
        from[i] = 0;
    check_channels(from, "before the kill");
    for (i = 0; i < nch; i++)
        check_after(i, 0, "before the kill");

    pub.h = h;
    atomic_store(&pub.stop, 0);
    ck_assert_int_eq(pthread_create(&pub.th, NULL, publisher_main, &pub), 0);
    rcptest_sleep_ms(200);
    /* The kill takes a while (cluster.sh sends SIGKILL and waits for the
     * death): what the publisher started meanwhile went to the dying node,
     * which may count a message and die before writing it to us. "Started
     * after the kill" is from the kill's return on. */
    kill_seq = atomic_load(&chs[cvictim].next);
    ck_assert_msg(rcpc_kill(&cl, t.node[vm].port, err, sizeof err) == 0, "%s", err);
    dead_seq = atomic_load(&chs[cvictim].next);
    from[cvictim2] = atomic_load(&chs[cvictim2].next);
    from[cvictim] = dead_seq;
    ck_assert_msg(wait_resub(cvictim, t.node[vr].port, rcptest_scale(30000)) == 0,
                  "no resubscribe event naming %s on the promoted replica %d (last: %s)",
                  chs[cvictim].name, t.node[vr].port, chs[cvictim].resub_msg);
    ck_assert_msg(wait_resub(cvictim2, t.node[vr].port, rcptest_scale(10000)) == 0,
                  "no resubscribe event naming %s on %d (last: %s)", chs[cvictim2].name,
                  t.node[vr].port, chs[cvictim2].resub_msg);
    finish_publishing(&pub, cvictim);
    {
        int unc, fail, s, lost = 0;
        tally(cvictim, &unc, &fail);
        for (s = 0; s < dead_seq; s++)
            if (chs[cvictim].result[s] >= 1 && atomic_load(&chs[cvictim].recv[s]) == 0)
                lost++;
        fprintf(stderr,
                "pubsub failover: %d killed, %d promoted; %s: killed between seq %d and %d, "
                "resubscribed at seq %d, %d published (%d counted by nobody, %d failed, %d "
                "counted by the dying node but lost); %s\n",
                t.node[vm].port, t.node[vr].port, chs[cvictim].name, kill_seq, dead_seq,
                atomic_load(&chs[cvictim].resub_seq), atomic_load(&chs[cvictim].next), unc, fail,
                lost, chs[cvictim].resub_msg);
    }

    /* Counted after the kill (by the promoted replica) means delivered;
     * what the dead node counted just before dying may be lost. */
    check_channels(from, "failover");
    check_after(cvictim, atomic_load(&chs[cvictim].resub_seq), "failover");
    check_after(cvictim2, atomic_load(&chs[cvictim2].resub_seq), "failover");
    /* The live master's channel lost nothing. */
    ck_assert_int_eq(atomic_load(&chs[cother].resub_seq), -1);
    check_after(cother, 0, "failover (other master)");
    rcp_pubsub_close(ps);
    rcp_cluster_close(h);
}
END_TEST

static void add_tests(TCase *tc)
{
    /* test_ssubscribe_failover last: it leaves a master down. */
    RCPTEST_ADD(tc, test_bad_arguments, test_classic_any_node, test_ssubscribe_reshard,
                test_ssubscribe_failover);
}

int main(void)
{
    static const char *const extra[] = {"--cluster-require-full-coverage", "no",
                                        "--cluster-allow-replica-migration", "no", NULL};
    return rcpc_main(&cl, "pubsub", 3, 1, extra, 120, add_tests);
}
