/* tests/fuzz/fuzz_slots.c: a CLUSTER SLOTS answer to a slot map. The bytes
 * after the first are RESP, read into a reply by the library's reader; the
 * reply goes through rcp__slots_parse (with the asked-for host chosen by the
 * first byte), and a table it accepts is checked and built into an
 * rcp__map the way the refresher does (one shard per range, master first,
 * nodes shared by address), then MOVED stores are applied to it and every
 * slot is looked up. */
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "cluster_int.h"
#include "fuzz.h"

static void check_table(const rcp__slots_table *t)
{
    unsigned char seen[RCP__SLOTS];
    size_t i, j, covered = 0;
    unsigned s;

    memset(seen, 0, sizeof seen);
    FUZZ_CHECK(t->nranges >= 1 && t->ranges != NULL);
    for (i = 0; i < t->nranges; i++) {
        const rcp__slots_range *rg = &t->ranges[i];
        FUZZ_CHECK(rg->start <= rg->end && rg->end < RCP__SLOTS);
        FUZZ_CHECK(rg->nnodes >= 1 && rg->nodes != NULL);
        for (s = rg->start; s <= rg->end; s++) {
            FUZZ_CHECK(!seen[s]);
            seen[s] = 1;
        }
        covered += rg->end - rg->start + 1;
        for (j = 0; j < rg->nnodes; j++) {
            const rcp__slots_node *n = &rg->nodes[j];
            size_t hl = strnlen(n->host, sizeof n->host);
            FUZZ_CHECK(hl > 0 && hl < sizeof n->host);
            FUZZ_CHECK(!(hl == 1 && n->host[0] == '?'));
            FUZZ_CHECK(strnlen(n->id, sizeof n->id) < sizeof n->id);
            FUZZ_CHECK(n->port >= 1 && n->port <= 65535);
        }
    }
    FUZZ_CHECK(covered == t->covered && covered <= RCP__SLOTS);
}

/* The node registry of the test: one rcp__node per distinct address. */
struct registry {
    rcp__node *nodes;
    size_t n, cap;
};

static rcp__node *node_get(struct registry *reg, const rcp__slots_node *sn)
{
    size_t i;
    for (i = 0; i < reg->n; i++)
        if (reg->nodes[i].port == sn->port && strcmp(reg->nodes[i].host, sn->host) == 0)
            return &reg->nodes[i];
    FUZZ_CHECK(reg->n < reg->cap);
    reg->nodes[reg->n].host = (char *)sn->host; /* the table outlives the map here */
    reg->nodes[reg->n].port = sn->port;
    return &reg->nodes[reg->n++];
}

static void build_and_check(const rcp__slots_table *t, const uint8_t *moves, size_t nmoves)
{
    struct registry reg;
    rcp__map *m;
    size_t i, j, nrep = 0, r = 0, nnodes = 0;
    unsigned s;

    for (i = 0; i < t->nranges; i++) {
        nrep += t->ranges[i].nnodes - 1;
        nnodes += t->ranges[i].nnodes;
    }
    reg.cap = nnodes + 1;
    reg.n = 0;
    reg.nodes = rcp__calloc(reg.cap, sizeof *reg.nodes);
    m = rcp__map_new();
    if (!reg.nodes || !m)
        goto out;
    m->shards = rcp__calloc(t->nranges, sizeof(rcp__shard));
    m->replica_store = rcp__calloc(nrep ? nrep : 1, sizeof(rcp__node *));
    if (!m->shards || !m->replica_store)
        goto out;
    m->nshards = t->nranges;
    for (i = 0; i < t->nranges; i++) {
        const rcp__slots_range *rg = &t->ranges[i];
        rcp__shard *sh = &m->shards[i];
        sh->master = node_get(&reg, &rg->nodes[0]);
        sh->replicas = &m->replica_store[r];
        for (j = 1; j < rg->nnodes; j++) {
            m->replica_store[r++] = node_get(&reg, &rg->nodes[j]);
            sh->nreplicas++;
        }
        for (s = rg->start; s <= rg->end; s++)
            atomic_store(&m->slots[s], sh);
    }
    m->covered = t->covered;

    /* MOVED stores: two bytes of slot, one of node choice each. */
    for (i = 0; i + 3 <= nmoves && i < 3 * 64; i += 3) {
        unsigned slot = ((unsigned)moves[i] << 8 | moves[i + 1]) & 0x7fff;
        rcp__node *to = &reg.nodes[moves[i + 2] % reg.n];
        int rv = rcp__map_move_slot(m, slot, to);
        if (slot >= RCP__SLOTS) {
            FUZZ_CHECK(rv == -1);
        } else if (rv == 0) {
            rcp__shard *sh = atomic_load(&m->slots[slot]);
            FUZZ_CHECK(sh && sh->master == to);
        }
    }

    /* Every slot: a hole, a range's own shard, or a MOVED shard. */
    for (s = 0; s < RCP__SLOTS; s++) {
        rcp__shard *sh = atomic_load(&m->slots[s]);
        if (!sh)
            continue;
        FUZZ_CHECK(sh->master >= reg.nodes && sh->master < reg.nodes + reg.n);
        if (sh >= m->shards && sh < m->shards + m->nshards) {
            const rcp__slots_range *rg = &t->ranges[sh - m->shards];
            FUZZ_CHECK(s >= rg->start && s <= rg->end);
            FUZZ_CHECK(sh->master->port == rg->nodes[0].port);
            FUZZ_CHECK(sh->nreplicas == rg->nnodes - 1);
        }
    }
out:
    rcp__map_free(m);
    rcp__free(reg.nodes);
}

int rcp_fuzz_slots(const uint8_t *data, size_t size)
{
    static const char *const asked[] = {"10.0.0.9", "", "?", NULL};
    rcp__slots_table *t = NULL;
    char err[128];
    rcp_reply *r;
    size_t resp_len;
    int rv;

    if (size < 2)
        return 0;
    rcp_fuzz_alloc_init();
    /* Byte 1 says how many trailing bytes (times 3) are MOVED stores
     * rather than RESP. */
    resp_len = size - 2;
    if ((size_t)data[1] * 3 <= resp_len)
        resp_len -= (size_t)data[1] * 3;
    r = rcp_fuzz_parse_one(data + 2, resp_len);
    if (!r)
        return 0;
    memset(err, 'X', sizeof err);
    rv = rcp__slots_parse(r, asked[data[0] & 3], &t, err, sizeof err);
    if (rv == 0) {
        FUZZ_CHECK(t != NULL);
        check_table(t);
        build_and_check(t, data + 2 + resp_len, size - 2 - resp_len);
        rcp__slots_free(t);
    } else {
        FUZZ_CHECK(rv == -1 && t == NULL);
        FUZZ_CHECK(memchr(err, '\0', sizeof err) != NULL && err[0] != '\0');
    }
    rcp_reply_free(r);
    return 0;
}
