/* hist.h: a fixed-size log-linear latency histogram for rcp-bench.
 *
 * HDR-style layout: values (nanoseconds) below 64 get one bucket each; above
 * that, every power-of-two range [64 * 2^(k-1), 64 * 2^k) is split into 64
 * equal sub-buckets, so any recorded value is known to within 1/64 (1.6%).
 * The range covers 0 ns to 2^36 ns (about 68.7 s, so 1 us .. 60 s and more);
 * larger values land in the top bucket and are counted as overflow.
 * Recording is a few integer instructions and never allocates, so each
 * thread keeps its own histogram and they are merged after the run. */
#ifndef RCP_BENCH_HIST_H
#define RCP_BENCH_HIST_H

#include <stdint.h>

#define HIST_SUB_BITS 6
#define HIST_SUB_COUNT (1u << HIST_SUB_BITS) /* linear sub-buckets per power of two */
#define HIST_TOP_BIT 36                      /* values must be < 2^36 ns */
#define HIST_NBUCKETS ((HIST_TOP_BIT - HIST_SUB_BITS + 1) * HIST_SUB_COUNT)

typedef struct hist {
    uint64_t count;    /* samples recorded */
    uint64_t sum_ns;   /* exact sum, for the mean */
    uint64_t min_ns;   /* exact extremes (UINT64_MAX / 0 while empty) */
    uint64_t max_ns;
    uint64_t overflow; /* samples >= 2^36 ns, clamped into the top bucket */
    uint64_t counts[HIST_NBUCKETS];
} hist;

void hist_init(hist *h);
void hist_record(hist *h, uint64_t ns);
/* Adds every sample of src to dst. */
void hist_merge(hist *dst, const hist *src);
/* The value (ns) at percentile p (0 < p <= 100): the middle of the bucket
 * that holds the ceil(p% * count)-th smallest sample, clamped to the exact
 * min/max. 0 when the histogram is empty. */
uint64_t hist_percentile(const hist *h, double p);
/* Mean in ns, 0 when empty. */
double hist_mean(const hist *h);

#endif
