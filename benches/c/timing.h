/* Clocks and the output format of the C benchmark drivers (idle_bench.c, pingpong.c).
 *
 * The drivers measure; benches/run.py computes every statistic (medians, percentiles, rates)
 * from what they print: raw samples (integer nanoseconds, one per operation, in the order
 * measured), totals (elapsed_s, cpu_s, in seconds), counts and the first error's text.
 *
 * Output: records, not JSON. C has no standard JSON writer, and rather than escape strings by
 * hand here the harness reads this simpler format (benches/run.py, parse_records) into the
 * same dict the Rust, Go and Python drivers print as JSON. One field per line:
 *
 *   NAME VALUE          a number                                     put_u64, put_f64
 *   NAME[] V V V ...    a list of numbers (possibly empty)           put_u64s
 *   NAME: TEXT          text, the rest of the line, verbatim         put_text
 *   [NAME]              starts a new object in the top-level list NAME: the fields after it,
 *                       up to the next [NAME], are that object's     put_object
 */
#ifndef WOOL_BENCH_TIMING_H
#define WOOL_BENCH_TIMING_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

/* Monotonic clock, nanoseconds. */
static inline uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* CPU seconds used by this process so far (all threads). */
static inline double process_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline void put_u64(const char *name, uint64_t value) {
    printf("%s %llu\n", name, (unsigned long long)value);
}

static inline void put_f64(const char *name, double value) { printf("%s %.9f\n", name, value); }

static inline void put_u64s(const char *name, const uint64_t *values, size_t n) {
    printf("%s[]", name);
    for (size_t i = 0; i < n; i++) printf(" %llu", (unsigned long long)values[i]);
    putchar('\n');
}

/* Text on one line: a control character (a newline...) is written as a space. */
static inline void put_text(const char *name, const char *text) {
    printf("%s: ", name);
    for (; *text; text++) putchar((unsigned char)*text < 0x20 ? ' ' : *text);
    putchar('\n');
}

static inline void put_object(const char *list) { printf("[%s]\n", list); }

/* A sequential run: one sample per call, the wall and CPU time of the timed loop. */
static inline void put_latency(const uint64_t *samples_ns, size_t n, double elapsed_s, double cpu_s) {
    put_u64s("samples_ns", samples_ns, n);
    put_f64("elapsed_s", elapsed_s);
    put_f64("cpu_s", cpu_s);
}

#endif
