/*
 * poll_then_retire: a C host that polls a Wool worker's idle time and retires it once it has
 * been idle long enough. Uses only include/wool.h.
 *
 *   poll_then_retire ADDRESS INTERVAL THRESHOLD [GRACE]
 *
 *   ADDRESS    the worker's target, e.g. 127.0.0.1:50051 or unix:/run/wool/w.sock
 *   INTERVAL   seconds between polls (positive)
 *   THRESHOLD  retire the worker once it has been idle at least this many seconds
 *   GRACE      seconds the worker's in-flight tasks get when it is stopped (default 10;
 *              negative = wait for them however long)
 *
 * For a mutual-TLS worker set WOOL_TLS_CA, WOOL_TLS_CERT and WOOL_TLS_KEY to PEM files
 * (WOOL_TLS_CA alone: one-way TLS).
 *
 * Prints each reading with a UTC timestamp. Exits 0 once the worker has been retired; on any
 * failure exits 1, printing the status name, the gRPC code and the library's last error.
 *
 * Build (after `cargo build`):
 *   cc -std=c11 -Iinclude examples/c/poll_then_retire.c -Ltarget/debug -lwool \
 *      -Wl,-rpath,"$PWD/target/debug" -o poll_then_retire
 */
#define _POSIX_C_SOURCE 200809L

#include "wool.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Each line starts with the wall-clock time (UTC, milliseconds), like every line of the demo. */
static void say(const char *format, ...) {
    struct timespec now;
    struct tm utc;
    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &utc);
    printf("%02d:%02d:%02d.%03ld  host    ", utc.tm_hour, utc.tm_min, utc.tm_sec,
           now.tv_nsec / 1000000L);
    va_list args;
    va_start(args, format);
    vprintf(format, args);
    va_end(args);
    putchar('\n');
    fflush(stdout);
}

/* Reports a failed call as the status name, the gRPC code and the last error, then exits 1. */
static void fail(const char *call, wool_status status) {
    char message[1024];
    wool_last_error(message, sizeof message); /* truncated if longer: fine for a report */
    fprintf(stderr, "poll_then_retire: %s failed: %s (gRPC code %d): %s\n", call,
            wool_status_name(status), (int)wool_last_rpc_code(), message);
    exit(1);
}

static double parse_seconds(const char *text, const char *what) {
    char *end = NULL;
    errno = 0;
    double seconds = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || isnan(seconds)) {
        fprintf(stderr, "poll_then_retire: %s must be a number of seconds, got \"%s\"\n", what,
                text);
        exit(2);
    }
    return seconds;
}

static void sleep_seconds(double seconds) {
    struct timespec pause = {(time_t)seconds, (long)((seconds - floor(seconds)) * 1e9)};
    while (nanosleep(&pause, &pause) != 0 && errno == EINTR) {
    }
}

/* TLS credentials from WOOL_TLS_CA / WOOL_TLS_CERT / WOOL_TLS_KEY; NULL (plaintext) if unset. */
static wool_credentials *credentials_from_environment(void) {
    const char *ca = getenv("WOOL_TLS_CA"), *cert = getenv("WOOL_TLS_CERT"),
               *key = getenv("WOOL_TLS_KEY");
    if (ca == NULL) return NULL;
    bool mutual = cert != NULL && key != NULL;
    wool_credentials *credentials = NULL;
    wool_status status = wool_credentials_from_files(ca, key, cert, mutual, NULL, &credentials);
    if (status != WOOL_STATUS_OK) fail("wool_credentials_from_files", status);
    return credentials;
}

int main(int argc, char **argv) {
    if (argc < 4 || argc > 5) {
        fprintf(stderr, "usage: %s ADDRESS INTERVAL THRESHOLD [GRACE]\n", argv[0]);
        return 2;
    }
    const char *address = argv[1];
    double interval = parse_seconds(argv[2], "INTERVAL");
    double threshold = parse_seconds(argv[3], "THRESHOLD");
    double grace = argc == 5 ? parse_seconds(argv[4], "GRACE") : 10.0;
    if (!(interval > 0.0 && isfinite(interval))) {
        fprintf(stderr, "poll_then_retire: INTERVAL must be positive seconds\n");
        return 2;
    }

    wool_credentials *credentials = credentials_from_environment();
    wool_connection *worker = NULL;
    wool_status status = wool_connect(address, credentials, &worker);
    wool_credentials_free(credentials); /* the connection keeps its own copy */
    if (status != WOOL_STATUS_OK) fail("wool_connect", status);

    say("polling %s every %.2f s; retire it once idle >= %.2f s (libwool %s)", address, interval,
        threshold, wool_version());
    for (;;) {
        double idle = 0.0;
        status = wool_idle(worker, 5.0, &idle);
        if (status != WOOL_STATUS_OK) fail("wool_idle", status);
        if (idle == 0.0) {
            say("idle %6.3f s   busy: work in flight", idle);
        } else {
            say("idle %6.3f s", idle);
        }
        if (idle >= threshold) break;
        sleep_seconds(interval);
    }

    /* The stop's own deadline must outlast the grace to see the worker's answer. */
    double timeout = grace < 0.0 || isinf(grace) ? INFINITY : grace + 10.0;
    say("idle >= %.2f s: retiring the worker (wool_stop, grace %.2f s)", threshold, grace);
    status = wool_stop(worker, grace, timeout);
    if (status != WOOL_STATUS_OK) fail("wool_stop", status);
    say("worker retired: it drained and answered the stop");
    wool_free(worker);
    return 0;
}
