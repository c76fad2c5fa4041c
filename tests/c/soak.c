/*
 * soak.c: a long-running soak of libwool's C API against a worker that keeps dying.
 *
 *   soak [OPTIONS] TARGET SECONDS
 *
 * For SECONDS it polls the worker at TARGET through the C API, from
 *   - `--threads` threads doing blocking wool_idle with a deadline of `--deadline` seconds:
 *     the first half on one shared handle (default channel options), the others each on a
 *     handle of its own with options of its own (so each has its own pooled channel and TCP
 *     connection), freed and made again every `--churn` calls;
 *   - one thread keeping `--in-flight` wool_idle_start calls in flight on one wool_queue (on a
 *     handle that shares the shared handle's pooled channel), woken by poll(2) on the queue's
 *     descriptor and collecting with wool_queue_next;
 * while scripts/soak.sh SIGKILLs and restarts the worker on the same port every 10 s.
 *
 * Every call must end WOOL_STATUS_OK or WOOL_STATUS_TRANSIENT (anything else is printed with
 * the last error / the completion's message), within its deadline + `--margin` (a watchdog also
 * reports calls still running past that, and calls that never return fail the run); every
 * completion must arrive exactly once, with the tag it was started with; an OK idle reading
 * must be finite and >= 0. Every `--sample` seconds it records its own RSS (VmRSS of
 * /proc/self/status) and open descriptors (/proc/self/fd), and at the end compares the last
 * window with the first (each window min(300 s, SECONDS / 3)): it fails when
 *   last-window max fds > first-window max fds + `--fd-slack`, or
 *   last-window max RSS > first-window max RSS * `--rss-factor` + `--rss-slack-mib` MiB.
 * Prints a progress line a minute and a report at the end; exits 0 when everything held,
 * 1 when anything failed, 2 on usage errors.
 */
#define _POSIX_C_SOURCE 200809L

#include "wool.h"

#include <dirent.h>
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
#include <malloc.h>
#define HAVE_MALLINFO2 1
#endif
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* ---- settings ---------------------------------------------------------------------------- */

static struct {
    const char *target;
    double seconds;       /* how long to poll */
    int threads;          /* blocking threads */
    double deadline;      /* each call's deadline, seconds */
    double margin;        /* a call longer than deadline + margin hung */
    double pause;         /* seconds between one thread's blocking calls */
    int in_flight;        /* started calls kept in flight on the queue */
    double queue_pause;   /* seconds a queue slot rests between its calls */
    int churn;            /* own-handle threads re-make their handle every this many calls */
    double sample;        /* seconds between RSS / fd samples */
    int fd_slack;         /* fds: last-window max <= first-window max + fd_slack */
    double rss_factor;    /* RSS: last-window max <= first-window max * rss_factor + slack */
    double rss_slack_mib;
} settings = {
    NULL, 0.0, 16, 1.0, 1.0, 0.010, 64, 0.250, 1000, 5.0, 16, 1.25, 8.0,
};

/* ---- clock, output ----------------------------------------------------------------------- */

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static double started_at; /* now() when polling began */

static void sleep_seconds(double seconds) {
    if (seconds <= 0.0) return;
    struct timespec t = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
}

static pthread_mutex_t print_lock = PTHREAD_MUTEX_INITIALIZER;

/* A line on stderr, prefixed with the run's elapsed time. */
static void note(const char *format, ...) {
    va_list args;
    va_start(args, format);
    pthread_mutex_lock(&print_lock);
    fprintf(stderr, "soak: %8.3f s: ", now() - started_at);
    vfprintf(stderr, format, args);
    fputc('\n', stderr);
    pthread_mutex_unlock(&print_lock);
    va_end(args);
}

/* A failure of the program itself (not a call being soaked): say so and give up. */
static void fatal(const char *what) {
    fprintf(stderr, "soak: %s failed: %s\n", what, strerror(errno));
    exit(1);
}

static void die(const char *what, wool_status status) {
    char message[512];
    wool_last_error(message, sizeof message);
    fprintf(stderr, "soak: %s gave %s: %s\n", what, wool_status_name(status), message);
    exit(1);
}

/* ---- statistics -------------------------------------------------------------------------- */

#define STATUSES 9      /* wool_status 0..7, and 8 for a value that is none */
#define BUCKETS 6       /* latency: <1 ms, <10 ms, <100 ms, <deadline, <=deadline+margin, more */
#define CODES 18        /* gRPC code + 1: -1 (none) .. 16 */
#define REPORTED 20     /* bad statuses / slow calls printed as they happen, at most */

static int status_index(wool_status status) {
    return (int)status >= 0 && (int)status < STATUSES - 1 ? (int)status : STATUSES - 1;
}

static const char *status_label(int index) {
    return index == STATUSES - 1 ? "(not a wool_status)" : wool_status_name((wool_status)index);
}

/* Written by one thread, read by the progress line and the report: relaxed atomics. */
typedef struct {
    _Atomic uint64_t count[STATUSES];
    _Atomic uint64_t sum_us[STATUSES];
    _Atomic uint64_t max_us[STATUSES];
    _Atomic uint64_t bucket[STATUSES][BUCKETS];
    _Atomic uint64_t code[STATUSES][CODES];
} call_stats;

static _Atomic uint64_t bad_statuses, slow_calls, bad_readings, stray_completions;
static _Atomic uint64_t max_reading_ms; /* the largest OK idle reading */

static uint64_t get(_Atomic uint64_t *value) {
    return atomic_load_explicit(value, memory_order_relaxed);
}
static void add(_Atomic uint64_t *value, uint64_t amount) {
    atomic_fetch_add_explicit(value, amount, memory_order_relaxed);
}
static void raise_to(_Atomic uint64_t *value, uint64_t candidate) {
    uint64_t seen = get(value);
    while (candidate > seen &&
           !atomic_compare_exchange_weak_explicit(value, &seen, candidate, memory_order_relaxed,
                                                  memory_order_relaxed)) {
    }
}

/* Messages of failed calls, digits folded to '#', counted (the first MESSAGES distinct ones). */
#define MESSAGES 32
#define MESSAGE_CHARS 200
static struct {
    char text[MESSAGE_CHARS];
    int status;
    uint64_t count;
} messages[MESSAGES];
static int message_kinds;
static uint64_t messages_dropped;
static pthread_mutex_t messages_lock = PTHREAD_MUTEX_INITIALIZER;

static void count_message(int status, const char *message) {
    char folded[MESSAGE_CHARS];
    size_t out = 0;
    for (size_t i = 0; message[i] != '\0' && out + 1 < sizeof folded; i++) {
        if (message[i] >= '0' && message[i] <= '9') {
            if (out == 0 || folded[out - 1] != '#') folded[out++] = '#';
        } else {
            folded[out++] = message[i];
        }
    }
    folded[out] = '\0';
    pthread_mutex_lock(&messages_lock);
    int i = 0;
    while (i < message_kinds && (messages[i].status != status || strcmp(messages[i].text, folded)))
        i++;
    if (i < message_kinds) {
        messages[i].count++;
    } else if (message_kinds < MESSAGES) {
        memcpy(messages[i].text, folded, out + 1);
        messages[i].status = status;
        messages[i].count = 1;
        message_kinds++;
    } else {
        messages_dropped++;
    }
    pthread_mutex_unlock(&messages_lock);
}

/*
 * One finished call: counted by status, latency, gRPC code; a bad status, a slow call or a
 * bad reading is also counted as a failure and printed (the first REPORTED of each).
 */
static void record(call_stats *stats, const char *who, wool_status status, int32_t rpc_code,
                   double latency, double reading, const char *message) {
    int s = status_index(status);
    uint64_t us = (uint64_t)(latency * 1e6);
    add(&stats->count[s], 1);
    add(&stats->sum_us[s], us);
    raise_to(&stats->max_us[s], us);
    int b = latency < 0.001                                 ? 0
            : latency < 0.01                                ? 1
            : latency < 0.1                                 ? 2
            : latency < settings.deadline                   ? 3
            : latency <= settings.deadline + settings.margin ? 4
                                                            : 5;
    add(&stats->bucket[s][b], 1);
    int c = rpc_code >= -1 && rpc_code <= 16 ? rpc_code + 1 : 0;
    add(&stats->code[s][c], 1);
    if (status != WOOL_STATUS_OK) count_message(s, message);
    if (status != WOOL_STATUS_OK && status != WOOL_STATUS_TRANSIENT) {
        if (atomic_fetch_add(&bad_statuses, 1) < REPORTED)
            note("FAIL %s: %s (gRPC %d) after %.3f s: %s", who, status_label(s), (int)rpc_code,
                 latency, message);
    }
    if (b == 5 && atomic_fetch_add(&slow_calls, 1) < REPORTED)
        note("FAIL %s: a call took %.3f s (deadline %.3f s + margin %.3f s), ended %s: %s", who,
             latency, settings.deadline, settings.margin, status_label(s), message);
    if (status == WOOL_STATUS_OK) {
        if (!isfinite(reading) || reading < 0.0) {
            if (atomic_fetch_add(&bad_readings, 1) < REPORTED)
                note("FAIL %s: idle reading %g", who, reading);
        } else {
            raise_to(&max_reading_ms, (uint64_t)(reading * 1e3));
        }
    }
}

/* ---- blocking threads -------------------------------------------------------------------- */

static atomic_int stopping;       /* set when SECONDS are over: start no new call */
static atomic_int threads_done;   /* pollers (blocking and queue) that have returned */

typedef struct {
    int index;
    wool_connection *shared; /* NULL: make its own */
    call_stats stats;
    _Atomic uint64_t in_call_since_us; /* 0 when not in a call; else now() * 1e6 at its start */
    _Atomic uint64_t watchdog_flagged;  /* the start of the call the watchdog reported */
    uint64_t handles_made;
} poller;

static wool_connection *own_handle(int index) {
    wool_channel_options *options = NULL;
    wool_status status = wool_channel_options_new(&options);
    if (status != WOOL_STATUS_OK) die("wool_channel_options_new", status);
    /* Options of its own: its own pool key, so its own channel and TCP connection. */
    status = wool_channel_options_set_max_concurrent_streams(options, (size_t)(100 + index));
    if (status != WOOL_STATUS_OK) die("wool_channel_options_set_max_concurrent_streams", status);
    wool_connection *conn = NULL;
    status = wool_connect_with_options(settings.target, NULL, options, &conn);
    if (status != WOOL_STATUS_OK) die("wool_connect_with_options", status);
    wool_channel_options_free(options);
    return conn;
}

static void *blocking_thread(void *argument) {
    poller *self = argument;
    char who[32], message[512];
    snprintf(who, sizeof who, "blocking thread %d", self->index);
    wool_connection *conn = self->shared;
    uint64_t calls = 0;
    while (!atomic_load(&stopping)) {
        if (self->shared == NULL && (conn == NULL || calls % (uint64_t)settings.churn == 0)) {
            wool_free(conn);
            conn = own_handle(self->index);
            self->handles_made++;
        }
        double seconds = NAN;
        double start = now();
        atomic_store(&self->in_call_since_us, (uint64_t)(start * 1e6));
        wool_status status = wool_idle(conn, settings.deadline, &seconds);
        double latency = now() - start;
        atomic_store(&self->in_call_since_us, 0);
        message[0] = '\0';
        if (status != WOOL_STATUS_OK) wool_last_error(message, sizeof message);
        record(&self->stats, who, status,
               status == WOOL_STATUS_OK ? -1 : wool_last_rpc_code(), latency, seconds, message);
        calls++;
        sleep_seconds(settings.pause);
    }
    if (self->shared == NULL) wool_free(conn);
    atomic_fetch_add(&threads_done, 1);
    return NULL;
}

/* ---- the queue thread -------------------------------------------------------------------- */

typedef struct {
    wool_connection *conn;
    call_stats stats;
    _Atomic uint64_t *slot_since_us; /* per slot: 0 free, else the call's start (us) */
    uint64_t *slot_seq;               /* per slot: the sequence number of its call */
    double *slot_next;                /* per slot: when it may start its next call */
    uint64_t started, completed, left_over;
    _Atomic uint64_t start_max_us, next_max_us; /* the non-blocking calls' own durations */
    uint64_t polls, empty_polls;
    _Atomic uint64_t watchdog_flags;
} queue_poller;

static void *queue_thread(void *argument) {
    queue_poller *self = argument;
    int slots = settings.in_flight;
    wool_queue *queue = NULL;
    wool_status status = wool_queue_new(&queue);
    if (status != WOOL_STATUS_OK) die("wool_queue_new", status);
    int fd = wool_queue_fd(queue);
    if (fd < 0) fatal("wool_queue_fd");
    wool_completion *done = calloc((size_t)slots, sizeof *done);
    if (done == NULL) fatal("calloc");
    double begin = now();
    for (int i = 0; i < slots; i++) self->slot_next[i] = begin + settings.queue_pause * i / slots;
    int in_flight = 0;
    double stop_seen = 0.0;
    for (;;) {
        double t = now();
        int stop = atomic_load(&stopping);
        if (stop && stop_seen == 0.0) stop_seen = t;
        if (stop && in_flight == 0) break;
        if (stop && t - stop_seen > settings.deadline + settings.margin + 1.0) {
            self->left_over = (uint64_t)in_flight; /* never completed: hung */
            note("FAIL queue thread: %d started calls never completed", in_flight);
            break;
        }
        double wake = t + 0.1;
        if (!stop) {
            for (int i = 0; i < slots; i++) {
                if (get(&self->slot_since_us[i]) != 0) continue;
                if (self->slot_next[i] > t) {
                    if (self->slot_next[i] < wake) wake = self->slot_next[i];
                    continue;
                }
                uint64_t call = 0, seq = ++self->slot_seq[i];
                uint64_t tag = seq << 16 | (uint64_t)i;
                double start = now();
                status = wool_idle_start(self->conn, queue, settings.deadline, tag, &call);
                double took = now() - start;
                raise_to(&self->start_max_us, (uint64_t)(took * 1e6));
                if (status != WOOL_STATUS_OK) {
                    char message[512];
                    wool_last_error(message, sizeof message);
                    record(&self->stats, "queue thread (wool_idle_start)", status,
                           wool_last_rpc_code(), took, NAN, message);
                    self->slot_next[i] = start + settings.queue_pause;
                    continue;
                }
                atomic_store(&self->slot_since_us[i], (uint64_t)(start * 1e6));
                self->started++;
                in_flight++;
            }
        }
        int wait_ms = (int)ceil((wake - now()) * 1e3);
        struct pollfd watched = {fd, POLLIN, 0};
        int ready = poll(&watched, 1, wait_ms < 0 ? 0 : wait_ms);
        if (ready < 0 && errno != EINTR) fatal("poll on the queue's descriptor");
        self->polls++;
        size_t count = 0;
        double start = now();
        status = wool_queue_next(queue, done, (size_t)slots, 0.0, &count);
        double end = now();
        raise_to(&self->next_max_us, (uint64_t)((end - start) * 1e6));
        if (status != WOOL_STATUS_OK) die("wool_queue_next", status);
        if (ready > 0 && count == 0) self->empty_polls++; /* readable, yet nothing to take */
        for (size_t k = 0; k < count; k++) {
            int i = (int)(done[k].tag & 0xffff);
            uint64_t seq = done[k].tag >> 16;
            uint64_t since = i < slots ? get(&self->slot_since_us[i]) : 0;
            if (i >= slots || since == 0 || self->slot_seq[i] != seq) {
                if (atomic_fetch_add(&stray_completions, 1) < REPORTED)
                    note("FAIL queue thread: a completion with tag %llu that is not in flight",
                         (unsigned long long)done[k].tag);
                continue;
            }
            done[k].message[WOOL_COMPLETION_MESSAGE_BYTES - 1] = '\0';
            record(&self->stats, "queue thread", done[k].status, done[k].rpc_code,
                   end - (double)since / 1e6, done[k].seconds, done[k].message);
            atomic_store(&self->slot_since_us[i], 0);
            self->slot_next[i] = end + settings.queue_pause;
            self->completed++;
            in_flight--;
        }
    }
    if (self->left_over == 0) wool_queue_free(queue); /* else: a hung call; leave it be */
    free(done);
    atomic_fetch_add(&threads_done, 1);
    return NULL;
}

/* ---- resources, watchdog, progress ------------------------------------------------------- */

typedef struct {
    double at;  /* seconds since started_at */
    long rss_kib;
    int fds;
    long heap_kib; /* bytes malloc has handed out and not had back (glibc mallinfo2); -1: unknown */
} sample;

static sample *samples;
static size_t sample_count, sample_capacity;

static long rss_kib(void) {
    FILE *status = fopen("/proc/self/status", "r");
    if (status == NULL) return -1;
    char line[256];
    long kib = -1;
    while (fgets(line, sizeof line, status) != NULL) {
        if (strncmp(line, "VmRSS:", 6) == 0) {
            kib = strtol(line + 6, NULL, 10);
            break;
        }
    }
    fclose(status);
    return kib;
}

/* Open descriptors, not counting the one reading /proc/self/fd. */
static int open_fds(void) {
    DIR *dir = opendir("/proc/self/fd");
    if (dir == NULL) return -1;
    int count = 0;
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL) {
        if (entry->d_name[0] != '.') count++;
    }
    closedir(dir);
    return count - 1;
}

/*
 * What the process has allocated and not freed (every arena, and mmap'd chunks): the heap's
 * true size, where RSS also holds what the allocator keeps for reuse. Information only: it
 * tells a leak (heap grows) from allocator retention (RSS grows, heap does not).
 */
static long heap_kib(void) {
#ifdef HAVE_MALLINFO2
    struct mallinfo2 info = mallinfo2();
    return (long)((info.uordblks + info.hblkhd) / 1024);
#else
    return -1;
#endif
}

static poller *pollers;
static queue_poller queued;
static atomic_int sampler_quit;

static void take_sample(void) {
    if (sample_count == sample_capacity) {
        size_t capacity = sample_capacity ? 2 * sample_capacity : 256;
        sample *grown = realloc(samples, capacity * sizeof *grown);
        if (grown == NULL) return;
        samples = grown;
        sample_capacity = capacity;
    }
    samples[sample_count++] = (sample){now() - started_at, rss_kib(), open_fds(), heap_kib()};
}

static uint64_t total(call_stats *stats, int status) { return get(&stats->count[status]); }

static void sum_stats(call_stats *sum, int include_blocking, int include_queue) {
    memset(sum, 0, sizeof *sum);
    for (int p = 0; p <= settings.threads; p++) {
        call_stats *from;
        if (p < settings.threads) {
            if (!include_blocking) continue;
            from = &pollers[p].stats;
        } else {
            if (!include_queue) continue;
            from = &queued.stats;
        }
        for (int s = 0; s < STATUSES; s++) {
            add(&sum->count[s], get(&from->count[s]));
            add(&sum->sum_us[s], get(&from->sum_us[s]));
            raise_to(&sum->max_us[s], get(&from->max_us[s]));
            for (int b = 0; b < BUCKETS; b++) add(&sum->bucket[s][b], get(&from->bucket[s][b]));
            for (int c = 0; c < CODES; c++) add(&sum->code[s][c], get(&from->code[s][c]));
        }
    }
}

static void progress(void) {
    call_stats blocking, queue;
    sum_stats(&blocking, 1, 0);
    sum_stats(&queue, 0, 1);
    uint64_t other_b = 0, other_q = 0;
    for (int s = 0; s < STATUSES; s++) {
        if (s == WOOL_STATUS_OK || s == WOOL_STATUS_TRANSIENT) continue;
        other_b += total(&blocking, s);
        other_q += total(&queue, s);
    }
    sample last = sample_count ? samples[sample_count - 1] : (sample){0, 0, 0, 0};
    note("blocking ok %llu transient %llu other %llu | queue ok %llu transient %llu other %llu |"
         " rss %.1f MiB, heap %.1f MiB, %d fds",
         (unsigned long long)total(&blocking, WOOL_STATUS_OK),
         (unsigned long long)total(&blocking, WOOL_STATUS_TRANSIENT),
         (unsigned long long)other_b, (unsigned long long)total(&queue, WOOL_STATUS_OK),
         (unsigned long long)total(&queue, WOOL_STATUS_TRANSIENT), (unsigned long long)other_q,
         (double)last.rss_kib / 1024.0, (double)last.heap_kib / 1024.0, last.fds);
}

/* A call still running past deadline + margin is reported once, while it runs. */
static void watchdog(void) {
    double limit = settings.deadline + settings.margin;
    for (int p = 0; p < settings.threads; p++) {
        uint64_t since = get(&pollers[p].in_call_since_us);
        uint64_t t = (uint64_t)(now() * 1e6); /* read after `since`: never before it */
        if (since != 0 && since < t && (double)(t - since) / 1e6 > limit &&
            get(&pollers[p].watchdog_flagged) != since) {
            atomic_store(&pollers[p].watchdog_flagged, since);
            note("watchdog: blocking thread %d's wool_idle has been running for %.3f s", p,
                 (double)(t - since) / 1e6);
        }
    }
    for (int i = 0; i < settings.in_flight; i++) {
        uint64_t since = get(&queued.slot_since_us[i]);
        uint64_t t = (uint64_t)(now() * 1e6);
        if (since != 0 && since < t && (double)(t - since) / 1e6 > limit + 0.2) {
            if (atomic_fetch_add(&queued.watchdog_flags, 1) < REPORTED)
                note("watchdog: queue slot %d's call has been in flight for %.3f s", i,
                     (double)(t - since) / 1e6);
        }
    }
}

static void *sampler_thread(void *argument) {
    (void)argument;
    double next_sample = started_at, next_progress = started_at + 60.0;
    while (!atomic_load(&sampler_quit)) {
        double t = now();
        if (t >= next_sample) {
            take_sample();
            next_sample += settings.sample;
        }
        if (t >= next_progress) {
            progress();
            next_progress += 60.0;
        }
        watchdog();
        sleep_seconds(0.1);
    }
    return NULL;
}

/* ---- report ------------------------------------------------------------------------------ */

static void print_stats(const char *name, call_stats *stats) {
    for (int s = 0; s < STATUSES; s++) {
        uint64_t count = total(stats, s);
        if (count == 0) continue;
        printf("  %-9s %-26s %10llu  %9.3f  %9.3f ", name, status_label(s),
               (unsigned long long)count, (double)get(&stats->max_us[s]) / 1e3,
               (double)get(&stats->sum_us[s]) / 1e3 / (double)count);
        for (int b = 0; b < BUCKETS; b++)
            printf(" %9llu", (unsigned long long)get(&stats->bucket[s][b]));
        printf("\n");
        if (s != WOOL_STATUS_OK) {
            printf("  %-9s %-26s gRPC codes:", "", "");
            for (int c = 0; c < CODES; c++) {
                uint64_t n = get(&stats->code[s][c]);
                if (n) printf(" %d: %llu", c - 1, (unsigned long long)n);
            }
            printf("\n");
        }
    }
}

/* The largest RSS and fd count among samples taken in [from, to] seconds. */
static void window_max(double from, double to, long *rss, int *fds, int *n) {
    *rss = -1;
    *fds = -1;
    *n = 0;
    for (size_t i = 0; i < sample_count; i++) {
        if (samples[i].at < from || samples[i].at > to) continue;
        (*n)++;
        if (samples[i].rss_kib > *rss) *rss = samples[i].rss_kib;
        if (samples[i].fds > *fds) *fds = samples[i].fds;
    }
}

/* The largest heap in use among samples taken in [from, to] seconds. */
static long window_heap(double from, double to) {
    long heap = -1;
    for (size_t i = 0; i < sample_count; i++)
        if (samples[i].at >= from && samples[i].at <= to && samples[i].heap_kib > heap)
            heap = samples[i].heap_kib;
    return heap;
}

/* The least-squares slope of RSS (heap: 0) or heap (1) over the samples taken in [from, to]
 * seconds, KiB per minute. */
static double slope(int heap, double from, double to) {
    double sx = 0, sy = 0, sxx = 0, sxy = 0, n = 0;
    for (size_t i = 0; i < sample_count; i++) {
        if (samples[i].at < from || samples[i].at > to) continue;
        double x = samples[i].at / 60.0;
        double y = (double)(heap ? samples[i].heap_kib : samples[i].rss_kib);
        n++;
        sx += x;
        sy += y;
        sxx += x * x;
        sxy += x * y;
    }
    if (n < 2) return 0.0;
    double d = n * sxx - sx * sx;
    return d == 0.0 ? 0.0 : (n * sxy - sx * sy) / d;
}

/* ---- main -------------------------------------------------------------------------------- */

static int usage(void) {
    fprintf(stderr,
            "usage: soak [--threads N] [--deadline S] [--margin S] [--pause-ms MS] [--in-flight N]\n"
            "            [--queue-pause-ms MS] [--churn N] [--sample S] [--fd-slack N]\n"
            "            [--rss-factor F] [--rss-slack-mib MIB] TARGET SECONDS\n");
    return 2;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    int i = 1;
    for (; i + 1 < argc && strncmp(argv[i], "--", 2) == 0; i += 2) {
        const char *name = argv[i] + 2;
        double value = strtod(argv[i + 1], NULL);
        if (!strcmp(name, "threads")) settings.threads = (int)value;
        else if (!strcmp(name, "deadline")) settings.deadline = value;
        else if (!strcmp(name, "margin")) settings.margin = value;
        else if (!strcmp(name, "pause-ms")) settings.pause = value / 1e3;
        else if (!strcmp(name, "in-flight")) settings.in_flight = (int)value;
        else if (!strcmp(name, "queue-pause-ms")) settings.queue_pause = value / 1e3;
        else if (!strcmp(name, "churn")) settings.churn = (int)value;
        else if (!strcmp(name, "sample")) settings.sample = value;
        else if (!strcmp(name, "fd-slack")) settings.fd_slack = (int)value;
        else if (!strcmp(name, "rss-factor")) settings.rss_factor = value;
        else if (!strcmp(name, "rss-slack-mib")) settings.rss_slack_mib = value;
        else return usage();
    }
    if (argc - i != 2) return usage();
    settings.target = argv[i];
    settings.seconds = strtod(argv[i + 1], NULL);
    if (!(settings.seconds > 0) || settings.threads < 1 || !(settings.deadline > 0) ||
        !(settings.margin >= 0) || settings.in_flight < 1 || settings.in_flight > 0xffff ||
        settings.churn < 1 || !(settings.sample > 0))
        return usage();

    printf("soak: %s for %.0f s: %d blocking threads (%d on one shared handle, %d on handles of "
           "their own, re-made every %d calls; %.1f ms between calls), 1 queue thread (%d in "
           "flight, %.1f ms rest per slot); deadline %.3f s, margin %.3f s; libwool %s\n",
           settings.target, settings.seconds, settings.threads, (settings.threads + 1) / 2,
           settings.threads / 2, settings.churn, settings.pause * 1e3, settings.in_flight,
           settings.queue_pause * 1e3, settings.deadline, settings.margin, wool_version());

    wool_connection *shared = NULL, *queue_conn = NULL;
    wool_status status = wool_connect(settings.target, NULL, &shared);
    if (status != WOOL_STATUS_OK) die("wool_connect", status);
    status = wool_connect(settings.target, NULL, &queue_conn);
    if (status != WOOL_STATUS_OK) die("wool_connect", status);

    pollers = calloc((size_t)settings.threads, sizeof *pollers);
    queued.conn = queue_conn;
    queued.slot_since_us = calloc((size_t)settings.in_flight, sizeof *queued.slot_since_us);
    queued.slot_seq = calloc((size_t)settings.in_flight, sizeof *queued.slot_seq);
    queued.slot_next = calloc((size_t)settings.in_flight, sizeof *queued.slot_next);
    if (!pollers || !queued.slot_since_us || !queued.slot_seq || !queued.slot_next)
        fatal("calloc");

    started_at = now();
    pthread_t sampler, queue_tid, *tids = calloc((size_t)settings.threads, sizeof *tids);
    if (tids == NULL) fatal("calloc");
    take_sample(); /* before any call: the baseline, reported but in the first window too */
    for (int p = 0; p < settings.threads; p++) {
        pollers[p].index = p;
        pollers[p].shared = p < (settings.threads + 1) / 2 ? shared : NULL;
        if (pthread_create(&tids[p], NULL, blocking_thread, &pollers[p]) != 0)
            fatal("pthread_create");
    }
    if (pthread_create(&queue_tid, NULL, queue_thread, &queued) != 0)
        fatal("pthread_create");
    if (pthread_create(&sampler, NULL, sampler_thread, NULL) != 0)
        fatal("pthread_create");

    sleep_seconds(settings.seconds - (now() - started_at));
    atomic_store(&stopping, 1);
    double stop_at = now();
    /* Every poller ends within its last call's deadline + margin (+1 s for the queue). */
    int expected = settings.threads + 1;
    while (atomic_load(&threads_done) < expected &&
           now() - stop_at < settings.deadline + settings.margin + 2.0)
        sleep_seconds(0.01);
    int hung = expected - atomic_load(&threads_done);
    double elapsed = now() - started_at;
    atomic_store(&sampler_quit, 1);
    pthread_join(sampler, NULL);
    if (hung == 0) {
        for (int p = 0; p < settings.threads; p++) pthread_join(tids[p], NULL);
        pthread_join(queue_tid, NULL);
    }
    take_sample(); /* after the last call */

    /* ---- the report ---- */
    call_stats blocking, queue;
    sum_stats(&blocking, 1, 0);
    sum_stats(&queue, 0, 1);
    printf("\n==== soak report: %.1f s against %s ====\n", elapsed, settings.target);
    printf("  %-9s %-26s %10s  %9s  %9s  %9s %9s %9s %9s %9s %9s\n", "calls", "status", "count",
           "max ms", "mean ms", "<1ms", "<10ms", "<100ms", "<deadline", "<=+margin", "hung");
    print_stats("blocking", &blocking);
    print_stats("queue", &queue);
    uint64_t made = 0;
    for (int p = 0; p < settings.threads; p++) made += pollers[p].handles_made;
    printf("  own handles made: %llu; queue: %llu started, %llu completed, %llu never completed;"
           " %llu polls of its descriptor (%llu readable with nothing to take)\n",
           (unsigned long long)made, (unsigned long long)queued.started,
           (unsigned long long)queued.completed, (unsigned long long)queued.left_over,
           (unsigned long long)queued.polls, (unsigned long long)queued.empty_polls);
    printf("  longest wool_idle_start %.3f ms, longest wool_queue_next (no wait) %.3f ms; "
           "largest idle reading %.3f s\n",
           (double)get(&queued.start_max_us) / 1e3, (double)get(&queued.next_max_us) / 1e3,
           (double)get(&max_reading_ms) / 1e3);
    if (message_kinds) {
        printf("  failure messages (digits folded to #):\n");
        for (int m = 0; m < message_kinds; m++)
            printf("    %10llu  %-22s %s\n", (unsigned long long)messages[m].count,
                   status_label(messages[m].status), messages[m].text);
        if (messages_dropped)
            printf("    %10llu  (other messages)\n", (unsigned long long)messages_dropped);
    }

    double window = fmin(300.0, elapsed / 3.0);
    long first_rss, last_rss;
    int first_fds, last_fds, first_n, last_n;
    window_max(0.0, window, &first_rss, &first_fds, &first_n);
    window_max(elapsed - window, elapsed + 1.0, &last_rss, &last_fds, &last_n);
    long min_rss = samples[0].rss_kib, max_rss = samples[0].rss_kib;
    int min_fds = samples[0].fds, max_fds = samples[0].fds;
    for (size_t k = 0; k < sample_count; k++) {
        if (samples[k].rss_kib < min_rss) min_rss = samples[k].rss_kib;
        if (samples[k].rss_kib > max_rss) max_rss = samples[k].rss_kib;
        if (samples[k].fds < min_fds) min_fds = samples[k].fds;
        if (samples[k].fds > max_fds) max_fds = samples[k].fds;
    }
    double rss_limit = (double)first_rss * settings.rss_factor + settings.rss_slack_mib * 1024.0;
    int fd_limit = first_fds + settings.fd_slack;
    int rss_ok = (double)last_rss <= rss_limit, fds_ok = last_fds <= fd_limit;
    printf("  resources: %zu samples every %.0f s; windows: first %.0f s vs last %.0f s "
           "(%d and %d samples)\n",
           sample_count, settings.sample, window, window, first_n, last_n);
    printf("    RSS  at start %.1f MiB, min %.1f, max %.1f; first-window max %.1f MiB, "
           "last-window max %.1f MiB, limit %.1f MiB (x%.2f + %.0f MiB): %s; trend after the first "
           "window %+.1f KiB/min\n",
           samples[0].rss_kib / 1024.0, min_rss / 1024.0, max_rss / 1024.0, first_rss / 1024.0,
           last_rss / 1024.0, rss_limit / 1024.0, settings.rss_factor, settings.rss_slack_mib,
           rss_ok ? "ok" : "GREW", slope(0, window, settings.seconds));
    printf("    fds  at start %d, min %d, max %d; first-window max %d, last-window max %d, "
           "limit %d (+%d): %s\n",
           samples[0].fds, min_fds, max_fds, first_fds, last_fds, fd_limit, settings.fd_slack,
           fds_ok ? "ok" : "GREW");
    if (samples[0].heap_kib >= 0)
        printf("    heap in use (mallinfo2, information only) at start %.1f MiB; first-window "
               "max %.1f MiB, last-window max %.1f MiB; trend after the first window "
               "%+.1f KiB/min\n",
               samples[0].heap_kib / 1024.0, window_heap(0.0, window) / 1024.0,
               window_heap(elapsed - window, elapsed + 1.0) / 1024.0,
               slope(1, window, settings.seconds));
    printf("    over time (s: RSS MiB / heap MiB / fds):");
    size_t step = sample_count > 13 ? (sample_count + 11) / 12 : 1;
    for (size_t k = 0; k < sample_count; k += step)
        printf(" %.0f:%.1f/%.1f/%d", samples[k].at, samples[k].rss_kib / 1024.0,
               samples[k].heap_kib / 1024.0, samples[k].fds);
    if ((sample_count - 1) % step)
        printf(" %.0f:%.1f/%.1f/%d", samples[sample_count - 1].at,
               samples[sample_count - 1].rss_kib / 1024.0,
               samples[sample_count - 1].heap_kib / 1024.0, samples[sample_count - 1].fds);
    printf("\n");

    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    double user = (double)usage.ru_utime.tv_sec + (double)usage.ru_utime.tv_usec / 1e6;
    double system = (double)usage.ru_stime.tv_sec + (double)usage.ru_stime.tv_usec / 1e6;
    printf("  CPU of this program: user %.1f s, system %.1f s (%.0f %% of one core)\n", user,
           system, 100.0 * (user + system) / elapsed);

    uint64_t calls = 0;
    for (int s = 0; s < STATUSES; s++) calls += total(&blocking, s) + total(&queue, s);
    int failed = 0;
#define VERDICT(bad, ...)                                                                     \
    do {                                                                                      \
        if (bad) {                                                                            \
            printf("  FAIL: " __VA_ARGS__);                                                   \
            printf("\n");                                                                     \
            failed = 1;                                                                       \
        }                                                                                     \
    } while (0)
    VERDICT(get(&bad_statuses), "%llu calls ended with a status other than OK or TRANSIENT",
            (unsigned long long)get(&bad_statuses));
    VERDICT(get(&slow_calls), "%llu calls took longer than deadline + margin (%.3f s)",
            (unsigned long long)get(&slow_calls), settings.deadline + settings.margin);
    VERDICT(hung, "%d pollers never returned from their last call", hung);
    VERDICT(queued.left_over, "%llu started calls never completed",
            (unsigned long long)queued.left_over);
    VERDICT(get(&stray_completions), "%llu completions that were not in flight",
            (unsigned long long)get(&stray_completions));
    VERDICT(get(&bad_readings), "%llu OK calls with a negative or non-finite reading",
            (unsigned long long)get(&bad_readings));
    VERDICT(!rss_ok, "RSS grew: last-window max %.1f MiB > %.1f MiB", last_rss / 1024.0,
            rss_limit / 1024.0);
    VERDICT(!fds_ok, "fds grew: last-window max %d > %d", last_fds, fd_limit);
    VERDICT(total(&blocking, WOOL_STATUS_OK) == 0 || total(&queue, WOOL_STATUS_OK) == 0,
            "no successful call (is the worker there?)");
    printf("  verdict: %s (%llu calls)\n", failed ? "FAIL" : "PASS", (unsigned long long)calls);
    fflush(NULL);
    if (hung) _exit(1); /* a thread is stuck inside the library: do not wait for it */

    wool_free(shared);
    wool_free(queue_conn);
    free(pollers);
    free(tids);
    free(queued.slot_since_us);
    free(queued.slot_seq);
    free(queued.slot_next);
    free(samples);
    return failed;
}
