/* idle_bench: wool_idle from C, for scripts/bench.sh (see BENCHMARKS.md).
 *
 *   idle_bench seq     ADDR N WARMUP [TIMEOUT] sequential polls on one handle, after WARMUP
 *                                             (TIMEOUT seconds per call, default 10; "inf" = none)
 *   idle_bench burst   ADDR LEVELS SECONDS    bursts of N threads polling at once on ONE handle
 *                                             (threads are capped at 256: see BENCHMARKS.md)
 *   idle_bench handles ADDR N                 N handles (wool_connect), each polled once; prints
 *                                             "ready {...}" and waits for a line on stdin
 *   idle_bench queue   ADDR LEVELS SECONDS    ONE thread keeping N polls in flight on ONE handle
 *                                             through a completion queue (wool_idle_start)
 *   idle_bench many    ADDRFILE MAX SWEEPS [TIMEOUT]
 *                                             wool_idle_many over every address in ADDRFILE (one
 *                                             handle each), MAX in flight, one deadline of
 *                                             TIMEOUT s (default 30) per sweep: 1 cold + SWEEPS warm
 *
 * Prints raw measurements on stdout as records (timing.h), in the shapes of the Rust driver's
 * (benches/wool_bench.rs): seq as seq-conn (samples_ns, elapsed_s, cpu_s); burst and queue as
 * burst (max_threads, then per level [levels] concurrency, bursts, ok, failed, elapsed_s,
 * first_error); many as sweep (endpoints, concurrency, sweep_ns: cold then warm, failures per
 * sweep, first_error). benches/run.py computes the statistics. Not a test: nothing here
 * asserts on time.
 * With WOOL_BENCH_TLS=DIR in the environment every handle is mutual TLS
 * (wool_credentials_from_files: DIR/ca.pem, DIR/client-key.pem, DIR/client-cert.pem, the files
 * `wool_bench tls-certs DIR` writes), as in the Rust driver; plaintext otherwise.
 * Build: cc -O2 -Iinclude benches/c/idle_bench.c -Ltarget/release -Wl,-rpath,... -lwool -lpthread
 */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "wool.h"
#include "timing.h"

#define MAX_THREADS 256

static void die(const char *what, wool_status s) {
    char msg[512];
    wool_last_error(msg, sizeof msg);
    fprintf(stderr, "idle_bench: %s: %s: %s\n", what, wool_status_name(s), msg);
    exit(1);
}

/* wool_connect, with the credentials WOOL_BENCH_TLS names (made once) or none. */
static wool_status bench_connect(const char *addr, wool_connection **out) {
    static wool_credentials *creds;
    static int loaded;
    if (!loaded) {
        const char *dir = getenv("WOOL_BENCH_TLS");
        if (dir && *dir) {
            char ca[4096], key[4096], cert[4096];
            snprintf(ca, sizeof ca, "%s/ca.pem", dir);
            snprintf(key, sizeof key, "%s/client-key.pem", dir);
            snprintf(cert, sizeof cert, "%s/client-cert.pem", dir);
            wool_status s = wool_credentials_from_files(ca, key, cert, true, NULL, &creds);
            if (s != WOOL_STATUS_OK) die("wool_credentials_from_files", s);
        }
        loaded = 1;
    }
    return wool_connect(addr, creds, out);
}

static int seq(const char *addr, size_t n, size_t warmup, double timeout) {
    wool_connection *conn;
    wool_status s = bench_connect(addr, &conn);
    if (s != WOOL_STATUS_OK) die("wool_connect", s);
    double idle;
    for (size_t i = 0; i < warmup; i++)
        if ((s = wool_idle(conn, timeout, &idle)) != WOOL_STATUS_OK) die("wool_idle", s);
    uint64_t *samples = malloc(n * sizeof *samples);
    double cpu = process_cpu();
    uint64_t start = now_ns();
    for (size_t i = 0; i < n; i++) {
        uint64_t t = now_ns();
        if ((s = wool_idle(conn, timeout, &idle)) != WOOL_STATUS_OK) die("wool_idle", s);
        samples[i] = now_ns() - t;
    }
    double elapsed = (double)(now_ns() - start) / 1e9;
    cpu = process_cpu() - cpu;
    put_latency(samples, n, elapsed, cpu);
    free(samples);
    wool_free(conn);
    return 0;
}

/* ---- bursts: every thread polls once per burst, between two barrier waits ---- */

struct burst_shared {
    wool_connection *conn;
    pthread_barrier_t start, done;
    int level;
    volatile int stop;
    uint64_t failed[MAX_THREADS];
    uint64_t ok[MAX_THREADS];
    char first_error[256];
    pthread_mutex_t lock;
};

struct burst_arg {
    struct burst_shared *shared;
    int index;
};

static void *burst_thread(void *p) {
    struct burst_arg *arg = p;
    struct burst_shared *sh = arg->shared;
    for (;;) {
        pthread_barrier_wait(&sh->start);
        if (sh->stop) return NULL;
        double idle;
        wool_status s = wool_idle(sh->conn, 60.0, &idle);
        if (s == WOOL_STATUS_OK) {
            sh->ok[arg->index]++;
        } else {
            sh->failed[arg->index]++;
            pthread_mutex_lock(&sh->lock);
            if (!sh->first_error[0]) {
                char msg[200];
                wool_last_error(msg, sizeof msg);
                snprintf(sh->first_error, sizeof sh->first_error, "%s: %s", wool_status_name(s), msg);
            }
            pthread_mutex_unlock(&sh->lock);
        }
        pthread_barrier_wait(&sh->done);
    }
}

static int burst(const char *addr, const char *levels, double seconds) {
    wool_connection *conn;
    wool_status s = bench_connect(addr, &conn);
    if (s != WOOL_STATUS_OK) die("wool_connect", s);
    double idle;
    if ((s = wool_idle(conn, 10.0, &idle)) != WOOL_STATUS_OK) die("wool_idle", s);
    put_u64("max_threads", MAX_THREADS);
    char *copy = strdup(levels), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int level = atoi(tok);
        if (level < 1 || level > MAX_THREADS) continue; /* capped: see the header comment */
        struct burst_shared *sh = calloc(1, sizeof *sh);
        sh->conn = conn;
        sh->level = level;
        pthread_mutex_init(&sh->lock, NULL);
        pthread_barrier_init(&sh->start, NULL, (unsigned)level + 1);
        pthread_barrier_init(&sh->done, NULL, (unsigned)level + 1);
        pthread_t threads[MAX_THREADS];
        struct burst_arg args[MAX_THREADS];
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, 256 * 1024);
        for (int i = 0; i < level; i++) {
            args[i] = (struct burst_arg){sh, i};
            pthread_create(&threads[i], &attr, burst_thread, &args[i]);
        }
        uint64_t bursts = 0, start = now_ns(), budget = (uint64_t)(seconds * 1e9);
        do {
            pthread_barrier_wait(&sh->start);
            pthread_barrier_wait(&sh->done);
            bursts++;
        } while (now_ns() - start < budget);
        double elapsed = (double)(now_ns() - start) / 1e9;
        sh->stop = 1;
        pthread_barrier_wait(&sh->start);
        for (int i = 0; i < level; i++) pthread_join(threads[i], NULL);
        uint64_t ok = 0, failed = 0;
        for (int i = 0; i < level; i++) ok += sh->ok[i], failed += sh->failed[i];
        put_object("levels");
        put_u64("concurrency", (uint64_t)level);
        put_u64("bursts", bursts);
        put_u64("ok", ok);
        put_u64("failed", failed);
        put_f64("elapsed_s", elapsed);
        put_text("first_error", sh->first_error);
        pthread_barrier_destroy(&sh->start);
        pthread_barrier_destroy(&sh->done);
        free(sh);
    }
    free(copy);
    wool_free(conn);
    return 0;
}

static int handles(const char *addr, size_t n) {
    wool_connection **conns = calloc(n, sizeof *conns);
    size_t failed = 0;
    for (size_t i = 0; i < n; i++) {
        wool_status s = bench_connect(addr, &conns[i]);
        if (s != WOOL_STATUS_OK) die("wool_connect", s);
        double idle;
        if (wool_idle(conns[i], 10.0, &idle) != WOOL_STATUS_OK) failed++;
    }
    /* The one JSON line of the C drivers (the harness reads "ready" + JSON from every
     * handles driver): two numbers, nothing to escape. */
    printf("ready {\"handles\":%zu,\"failed\":%zu}\n", n, failed);
    fflush(stdout);
    char line[64];
    if (!fgets(line, sizeof line, stdin)) { /* EOF: done all the same */ }
    for (size_t i = 0; i < n; i++) wool_free(conns[i]);
    free(conns);
    return 0;
}

/* Keeps `level` idle polls in flight from this one thread for `seconds`: each completion
 * collected is replaced by a new start at once. */
static int queue(const char *addr, const char *levels, double seconds) {
    wool_connection *conn;
    wool_status s = bench_connect(addr, &conn);
    if (s != WOOL_STATUS_OK) die("wool_connect", s);
    double idle;
    if ((s = wool_idle(conn, 10.0, &idle)) != WOOL_STATUS_OK) die("wool_idle", s);
    wool_queue *q;
    if ((s = wool_queue_new(&q)) != WOOL_STATUS_OK) die("wool_queue_new", s);
    enum { BATCH = 1024 };
    wool_completion *done = malloc(BATCH * sizeof *done);
    char *copy = strdup(levels), *save = NULL, first_error[WOOL_COMPLETION_MESSAGE_BYTES] = "";
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        long level = atol(tok);
        if (level < 1) continue;
        uint64_t ok = 0, failed = 0, call, start = now_ns(), budget = (uint64_t)(seconds * 1e9);
        long in_flight = 0;
        for (; in_flight < level; in_flight++)
            if ((s = wool_idle_start(conn, q, 60.0, 0, &call)) != WOOL_STATUS_OK) die("start", s);
        int refill = 1;
        while (in_flight > 0) {
            size_t n = 0;
            if ((s = wool_queue_next(q, done, BATCH, INFINITY, &n)) != WOOL_STATUS_OK) die("next", s);
            in_flight -= (long)n;
            for (size_t i = 0; i < n; i++) {
                if (done[i].status == WOOL_STATUS_OK) ok++;
                else if (failed++ == 0) snprintf(first_error, sizeof first_error, "%s", done[i].message);
            }
            if (refill && now_ns() - start >= budget) refill = 0;
            for (size_t i = 0; refill && i < n; i++, in_flight++)
                if ((s = wool_idle_start(conn, q, 60.0, 0, &call)) != WOOL_STATUS_OK) die("start", s);
        }
        double elapsed = (double)(now_ns() - start) / 1e9;
        put_object("levels");
        put_u64("concurrency", (uint64_t)level);
        put_u64("bursts", 1);
        put_u64("ok", ok);
        put_u64("failed", failed);
        put_f64("elapsed_s", elapsed);
        put_text("first_error", first_error);
    }
    free(copy);
    free(done);
    wool_queue_free(q);
    wool_free(conn);
    return 0;
}

/* wool_idle_many over the addresses in `file` (one handle each), `max` in flight: one cold
 * sweep (connections made), then `sweeps` warm ones. The shape of the Rust sweep's output; the
 * first error is the first failed poll's status name (wool_idle_many gives no message). */
static int many(const char *file, size_t max, size_t sweeps, double timeout) {
    FILE *in = fopen(file, "r");
    if (!in) { perror(file); return 1; }
    size_t n = 0, cap = 1024;
    wool_connection **conns = malloc(cap * sizeof *conns);
    char line[512];
    while (fgets(line, sizeof line, in)) {
        line[strcspn(line, "\r\n")] = 0;
        if (!*line) continue;
        if (n == cap) conns = realloc(conns, (cap *= 2) * sizeof *conns);
        wool_status s = bench_connect(line, &conns[n]);
        if (s != WOOL_STATUS_OK) die("wool_connect", s);
        n++;
    }
    fclose(in);
    double *seconds = malloc(n * sizeof *seconds);
    wool_status *statuses = malloc(n * sizeof *statuses);
    uint64_t *sweep_ns = malloc((sweeps + 1) * sizeof *sweep_ns);
    uint64_t *failures = calloc(sweeps + 1, sizeof *failures);
    const char *first_error = "";
    for (size_t sweep = 0; sweep <= sweeps; sweep++) {
        uint64_t t = now_ns();
        wool_status s = wool_idle_many((const wool_connection *const *)conns, n, timeout, max,
                                       seconds, statuses, NULL);
        if (s != WOOL_STATUS_OK) die("wool_idle_many", s);
        sweep_ns[sweep] = now_ns() - t;
        for (size_t i = 0; i < n; i++) {
            if (statuses[i] == WOOL_STATUS_OK) continue;
            if (failures[sweep]++ == 0 && !*first_error) first_error = wool_status_name(statuses[i]);
        }
    }
    put_u64("endpoints", n);
    put_u64("concurrency", max);
    put_u64s("sweep_ns", sweep_ns, sweeps + 1);
    put_u64s("failures", failures, sweeps + 1);
    put_text("first_error", first_error);
    for (size_t i = 0; i < n; i++) wool_free(conns[i]);
    free(conns);
    free(seconds);
    free(statuses);
    free(sweep_ns);
    free(failures);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 5 && !strcmp(argv[1], "seq"))
        return seq(argv[2], strtoull(argv[3], NULL, 10), strtoull(argv[4], NULL, 10),
                   argc >= 6 ? strtod(argv[5], NULL) : 10.0);
    if (argc >= 5 && !strcmp(argv[1], "burst")) return burst(argv[2], argv[3], atof(argv[4]));
    if (argc >= 4 && !strcmp(argv[1], "handles")) return handles(argv[2], strtoull(argv[3], NULL, 10));
    if (argc >= 5 && !strcmp(argv[1], "queue")) return queue(argv[2], argv[3], atof(argv[4]));
    if (argc >= 5 && !strcmp(argv[1], "many"))
        return many(argv[2], strtoull(argv[3], NULL, 10), strtoull(argv[4], NULL, 10),
                    argc >= 6 ? strtod(argv[5], NULL) : 30.0);
    fprintf(stderr, "usage: idle_bench seq ADDR N WARMUP | burst ADDR LEVELS SECONDS | handles ADDR N"
                    " | queue ADDR LEVELS SECONDS | many ADDRFILE MAX SWEEPS [TIMEOUT]\n");
    return 2;
}
