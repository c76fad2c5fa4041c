/* Timing and percentile helpers shared by the C benchmark drivers. */
#ifndef WOOL_BENCH_TIMING_H
#define WOOL_BENCH_TIMING_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* CPU seconds used by this process so far (all threads). */
static double process_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* qsort comparator for uint64_t. */
static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The q-quantile (nearest rank) of n sorted nanosecond samples, in microseconds. */
static double pick(const uint64_t *sorted, size_t n, double q) {
    size_t i = (size_t)ceil(q * (double)n);
    if (i < 1) i = 1;
    if (i > n) i = n;
    return (double)sorted[i - 1] / 1e3;
}

#endif
