/* hist.c: the log-linear latency histogram (see hist.h for the layout). */
#include "hist.h"

#include <math.h>
#include <string.h>

void hist_init(hist *h)
{
    memset(h, 0, sizeof(*h));
    h->min_ns = UINT64_MAX;
}

static unsigned msb64(uint64_t v)
{
    /* v != 0 */
    return 63u - (unsigned)__builtin_clzll(v);
}

/* Bucket k = 0 holds 0..63 one value each; bucket k >= 1 holds
 * [64 << (k-1), 64 << k) in 64 sub-buckets of width 1 << (k-1). */
static unsigned bucket_index(uint64_t v)
{
    unsigned k, shift;

    if (v < HIST_SUB_COUNT)
        return (unsigned)v;
    k = msb64(v) - (HIST_SUB_BITS - 1);
    shift = k - 1;
    return k * HIST_SUB_COUNT + (unsigned)((v >> shift) - HIST_SUB_COUNT);
}

static uint64_t bucket_low(unsigned idx)
{
    unsigned k = idx / HIST_SUB_COUNT, sub = idx % HIST_SUB_COUNT;

    if (k == 0)
        return sub;
    return (uint64_t)(HIST_SUB_COUNT + sub) << (k - 1);
}

static uint64_t bucket_width(unsigned idx)
{
    unsigned k = idx / HIST_SUB_COUNT;

    return k == 0 ? 1 : (uint64_t)1 << (k - 1);
}

void hist_record(hist *h, uint64_t ns)
{
    uint64_t v = ns;

    if (v >= ((uint64_t)1 << HIST_TOP_BIT)) {
        v = ((uint64_t)1 << HIST_TOP_BIT) - 1;
        h->overflow++;
    }
    h->counts[bucket_index(v)]++;
    h->count++;
    h->sum_ns += ns;
    if (ns < h->min_ns)
        h->min_ns = ns;
    if (ns > h->max_ns)
        h->max_ns = ns;
}

void hist_merge(hist *dst, const hist *src)
{
    unsigned i;

    for (i = 0; i < HIST_NBUCKETS; i++)
        dst->counts[i] += src->counts[i];
    dst->count += src->count;
    dst->sum_ns += src->sum_ns;
    dst->overflow += src->overflow;
    if (src->min_ns < dst->min_ns)
        dst->min_ns = src->min_ns;
    if (src->max_ns > dst->max_ns)
        dst->max_ns = src->max_ns;
}

uint64_t hist_percentile(const hist *h, double p)
{
    uint64_t target, seen = 0, v;
    unsigned i;

    if (h->count == 0)
        return 0;
    if (p >= 100.0)
        return h->max_ns;
    target = (uint64_t)ceil(p / 100.0 * (double)h->count);
    if (target < 1)
        target = 1;
    for (i = 0; i < HIST_NBUCKETS; i++) {
        seen += h->counts[i];
        if (seen >= target)
            break;
    }
    if (i == HIST_NBUCKETS)
        return h->max_ns;
    v = bucket_low(i) + (bucket_width(i) - 1) / 2;
    if (v < h->min_ns)
        v = h->min_ns;
    if (v > h->max_ns)
        v = h->max_ns;
    return v;
}

double hist_mean(const hist *h)
{
    return h->count ? (double)h->sum_ns / (double)h->count : 0.0;
}
