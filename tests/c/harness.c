/*
 * harness.c: the C test program for libwool's C API (include/wool.h).
 *
 * `harness CASE ARGS...` runs one case and exits 0 when every check holds; a failed check
 * prints where and why (with the status name and the last error) and exits 1. tests/integration/c_api.rs
 * builds it, arranges each case's world (real wool-worker processes, throwaway PKI, a worker
 * without idle, an address nobody listens on, hostile fake workers) and runs it, also under
 * valgrind.
 */
#define _POSIX_C_SOURCE 200809L

#include "wool.h"

#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- checks ---------------------------------------------------------------------------- */

static void print_last_error(void) {
    char message[512];
    size_t length = wool_last_error(message, sizeof message);
    fprintf(stderr, "    last error (%zu bytes, rpc code %d): %s\n", length, (int)wool_last_rpc_code(),
            length ? message : "(none)");
}

#define CHECK(condition)                                                                      \
    do {                                                                                      \
        if (!(condition)) {                                                                   \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #condition);     \
            print_last_error();                                                               \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

#define CHECK_STATUS(call, expected)                                                          \
    do {                                                                                      \
        wool_status got_ = (call);                                                            \
        if (got_ != (expected)) {                                                             \
            fprintf(stderr, "%s:%d: %s\n    gave %s, expected %s\n", __FILE__, __LINE__, #call, \
                    wool_status_name(got_), wool_status_name(expected));                      \
            print_last_error();                                                               \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

/* The last error's message, copied (static buffer). */
static const char *last_error(void) {
    static char message[1024];
    wool_last_error(message, sizeof message);
    return message;
}

/*
 * A refused call: WOOL_STATUS_INVALID_ARGUMENT, no gRPC code, and a message set by this very
 * call (it mentions `about`, which the previous failure's message did not).
 */
static void expect_invalid(int line, wool_status status, const char *about) {
    if (status != WOOL_STATUS_INVALID_ARGUMENT) {
        fprintf(stderr, "harness.c:%d: gave %s, expected WOOL_STATUS_INVALID_ARGUMENT\n", line,
                wool_status_name(status));
        print_last_error();
        exit(1);
    }
    if (wool_last_rpc_code() != -1 || strstr(last_error(), about) == NULL) {
        fprintf(stderr, "harness.c:%d: expected rpc code -1 and a message about \"%s\"\n", line,
                about);
        print_last_error();
        exit(1);
    }
}
#define EXPECT_INVALID(call, about) expect_invalid(__LINE__, (call), (about))

/* Seconds on the monotonic clock. */
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void sleep_seconds(double seconds) {
    struct timespec t = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    nanosleep(&t, NULL);
}

/* A file's whole content, NUL-terminated, malloc'd. */
static char *read_file(const char *path) {
    FILE *file = fopen(path, "rb");
    CHECK(file != NULL);
    CHECK(fseek(file, 0, SEEK_END) == 0);
    long size = ftell(file);
    CHECK(size >= 0);
    rewind(file);
    char *text = malloc((size_t)size + 1);
    CHECK(text != NULL);
    CHECK(fread(text, 1, (size_t)size, file) == (size_t)size);
    text[size] = '\0';
    fclose(file);
    return text;
}

static wool_connection *connect_plaintext(const char *target) {
    wool_connection *conn = NULL;
    CHECK_STATUS(wool_connect(target, NULL, &conn), WOOL_STATUS_OK);
    CHECK(conn != NULL);
    return conn;
}

/* A mutual-TLS connection from PEM files: (ca, cert, key). */
static wool_connection *connect_mutual(const char *target, const char *ca, const char *cert,
                                       const char *key) {
    wool_credentials *credentials = NULL;
    CHECK_STATUS(wool_credentials_from_files(ca, key, cert, true, NULL, &credentials),
                 WOOL_STATUS_OK);
    wool_connection *conn = NULL;
    CHECK_STATUS(wool_connect(target, credentials, &conn), WOOL_STATUS_OK);
    wool_credentials_free(credentials); /* the handle keeps its own copy */
    return conn;
}

/* ---- cases ----------------------------------------------------------------------------- */

/* names VERSION: status names, version, and the last error before any failure. */
static int case_names(int argc, char **argv) {
    CHECK(argc == 1);
    CHECK(strcmp(wool_version(), argv[0]) == 0);

    /* Given no failure yet on this thread, then there is no last error. */
    char buf[16];
    memset(buf, 'x', sizeof buf);
    CHECK(wool_last_error(NULL, 0) == 0);
    CHECK(wool_last_error(buf, sizeof buf) == 0);
    CHECK(buf[0] == '\0');
    CHECK(wool_last_rpc_code() == -1);

    static const char *const names[] = {
        "WOOL_STATUS_OK",        "WOOL_STATUS_INVALID_ARGUMENT", "WOOL_STATUS_IDLE_UNAVAILABLE",
        "WOOL_STATUS_TRANSIENT", "WOOL_STATUS_HANDSHAKE",        "WOOL_STATUS_RPC_ERROR",
        "WOOL_STATUS_PANIC",     "WOOL_STATUS_CANCELLED",
    };
    for (int value = 0; value <= 7; value++) {
        CHECK(strcmp(wool_status_name((wool_status)value), names[value]) == 0);
    }
    CHECK(strcmp(wool_status_name(WOOL_STATUS_TRANSIENT), "WOOL_STATUS_TRANSIENT") == 0);
    /* Values that are no wool_status: never NULL, always "WOOL_STATUS_UNKNOWN". */
    const int unknown[] = {8, 9, 100, -1, 0x7fffffff, (int)0x80000000u};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        const char *name = wool_status_name((wool_status)unknown[i]);
        CHECK(name != NULL && strcmp(name, "WOOL_STATUS_UNKNOWN") == 0);
    }

    /* Freeing NULL is a no-op. */
    wool_free(NULL);
    wool_credentials_free(NULL);
    CHECK(wool_last_error(NULL, 0) == 0);
    return 0;
}

/*
 * invalid WORKER CA CERT KEY SCRATCH_DIR: every bad input is refused before any I/O, leaves
 * *out untouched, sets a message and no gRPC code; and the worker keeps running through it.
 */
static int case_invalid(int argc, char **argv) {
    CHECK(argc == 5);
    const char *worker = argv[0], *ca_path = argv[1], *cert_path = argv[2], *key_path = argv[3];
    const char *scratch = argv[4];

    /* wool_connect: NULL target and out, non-UTF-8, empty and malformed targets. */
    wool_connection *const untouched_conn = (wool_connection *)&untouched_conn;
    wool_connection *conn = untouched_conn;
    EXPECT_INVALID(wool_connect(NULL, NULL, &conn), "target is NULL");
    CHECK(conn == untouched_conn);
    EXPECT_INVALID(wool_connect(worker, NULL, NULL), "out is NULL");
    EXPECT_INVALID(wool_connect("\xff\xfe:50051", NULL, &conn), "UTF-8");
    EXPECT_INVALID(wool_connect("", NULL, &conn), "empty");
    EXPECT_INVALID(wool_connect("127.0.0.1:99999", NULL, &conn), "1-65535");
    static const char *const malformed[] = {
        "localhost", "localhost:", ":50051", "127.0.0.1:0", "127.0.0.1:-1", "127.0.0.1:5x",
        "http://127.0.0.1:1", "host name:1", "::1:50051", "ipv4:localhost:1", "unix:",
    };
    for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++) {
        EXPECT_INVALID(wool_connect(malformed[i], NULL, &conn), "invalid target");
    }
    CHECK(conn == untouched_conn);

    /* wool_idle / wool_stop: NULL conn or out, bad timeouts, NaN grace. */
    conn = connect_plaintext(worker);
    double seconds = 12345.0;
    EXPECT_INVALID(wool_idle(NULL, 5.0, &seconds), "conn is NULL");
    EXPECT_INVALID(wool_idle(conn, 5.0, NULL), "out_seconds is NULL");
    const double bad_timeouts[] = {0.0, -0.0, -1.0, NAN, -INFINITY};
    for (size_t i = 0; i < sizeof bad_timeouts / sizeof bad_timeouts[0]; i++) {
        EXPECT_INVALID(wool_idle(conn, bad_timeouts[i], &seconds), "timeout");
        EXPECT_INVALID(wool_stop(conn, 0.0, bad_timeouts[i]), "timeout");
    }
    CHECK(seconds == 12345.0);
    EXPECT_INVALID(wool_stop(NULL, 0.0, 5.0), "conn is NULL");
    EXPECT_INVALID(wool_stop(conn, NAN, 5.0), "grace");

    /* Credentials: NULL and non-UTF-8 text, garbage PEM, missing parts, a bad identity. */
    char *ca = read_file(ca_path), *cert = read_file(cert_path), *key = read_file(key_path);
    wool_credentials *const untouched_credentials = (wool_credentials *)&untouched_credentials;
    wool_credentials *credentials = untouched_credentials;
    EXPECT_INVALID(wool_credentials_from_pem(NULL, key, cert, true, NULL, &credentials),
                   "ca_pem is NULL");
    EXPECT_INVALID(wool_credentials_from_pem(ca, key, cert, true, NULL, NULL), "out is NULL");
    EXPECT_INVALID(wool_credentials_from_pem("\xff\xfe", NULL, NULL, false, NULL, &credentials),
                   "UTF-8");
    EXPECT_INVALID(wool_credentials_from_pem("garbage, not PEM", NULL, NULL, false, NULL,
                                             &credentials),
                   "CA PEM");
    EXPECT_INVALID(wool_credentials_from_pem(ca, "garbage", cert, true, NULL, &credentials),
                   "key");
    EXPECT_INVALID(wool_credentials_from_pem(ca, key, "garbage", true, NULL, &credentials),
                   "client certificate");
    EXPECT_INVALID(wool_credentials_from_pem(ca, NULL, cert, true, NULL, &credentials),
                   "key_pem was not given");
    EXPECT_INVALID(wool_credentials_from_pem(ca, key, NULL, true, NULL, &credentials),
                   "cert_pem was not given");
    EXPECT_INVALID(wool_credentials_from_pem(ca, NULL, NULL, false, "not a name!", &credentials),
                   "identity");
    EXPECT_INVALID(wool_credentials_from_pem(ca, NULL, NULL, false, "\xc3\x28", &credentials),
                   "identity is not valid UTF-8");

    char missing[4096], garbage[4096];
    snprintf(missing, sizeof missing, "%s/no-such-file.pem", scratch);
    snprintf(garbage, sizeof garbage, "%s/garbage.pem", scratch);
    FILE *file = fopen(garbage, "w");
    CHECK(file != NULL);
    fputs("-----BEGIN CERTIFICATE-----\nnot base64 at all!\n-----END CERTIFICATE-----\n", file);
    fclose(file);
    EXPECT_INVALID(wool_credentials_from_files(NULL, NULL, NULL, false, NULL, &credentials),
                   "ca_path is NULL");
    EXPECT_INVALID(wool_credentials_from_files(missing, NULL, NULL, false, NULL, &credentials),
                   "no-such-file.pem");
    EXPECT_INVALID(wool_credentials_from_files(ca_path, missing, cert_path, true, NULL,
                                               &credentials),
                   "no-such-file.pem");
    EXPECT_INVALID(wool_credentials_from_files(garbage, NULL, NULL, false, NULL, &credentials),
                   "CA PEM");
    EXPECT_INVALID(wool_credentials_from_files(ca_path, NULL, cert_path, true, NULL,
                                               &credentials),
                   "key_path was not given");
    EXPECT_INVALID(wool_credentials_from_files("\xff.pem", NULL, NULL, false, NULL, &credentials),
                   "UTF-8");
    EXPECT_INVALID(wool_credentials_from_files(ca_path, key_path, cert_path, true, NULL, NULL),
                   "out is NULL");
    CHECK(credentials == untouched_credentials);

    /* One-way credentials need no key or certificate (they are ignored when given). */
    CHECK_STATUS(wool_credentials_from_pem(ca, NULL, NULL, false, "", &credentials),
                 WOOL_STATUS_OK);
    wool_credentials_free(credentials);
    CHECK_STATUS(wool_credentials_from_pem(ca, "ignored", "ignored", false, "localhost",
                                           &credentials),
                 WOOL_STATUS_OK);
    wool_credentials_free(credentials);

    /* A success does not clear the last error; the refused calls sent nothing: the worker runs. */
    EXPECT_INVALID(wool_stop(conn, NAN, 5.0), "grace");
    char before[1024];
    snprintf(before, sizeof before, "%s", last_error());
    CHECK_STATUS(wool_idle(conn, 5.0, &seconds), WOOL_STATUS_OK);
    CHECK(seconds >= 0.0 && seconds != 12345.0);
    CHECK(strcmp(last_error(), before) == 0);
    CHECK(wool_last_rpc_code() == -1);

    free(ca);
    free(cert);
    free(key);
    wool_free(conn);
    return 0;
}

/* last-error: wool_last_error copies a truncated, NUL-terminated message; returns its length. */
static int case_last_error(int argc, char **argv) {
    (void)argv;
    CHECK(argc == 0);
    wool_connection *conn = NULL;
    EXPECT_INVALID(wool_connect("", NULL, &conn), "empty");
    const char *expected = "wool_connect: invalid target \"\": empty";
    size_t length = strlen(expected);

    char buf[128];
    CHECK(wool_last_error(NULL, 0) == length);
    CHECK(wool_last_error(buf, sizeof buf) == length);
    CHECK(strcmp(buf, expected) == 0);

    memset(buf, 'x', sizeof buf);
    CHECK(wool_last_error(buf, length + 1) == length); /* exactly fits */
    CHECK(strcmp(buf, expected) == 0);

    memset(buf, 'x', sizeof buf);
    CHECK(wool_last_error(buf, length) == length); /* one short: the last byte is cut */
    CHECK(strlen(buf) == length - 1 && strncmp(buf, expected, length - 1) == 0);

    memset(buf, 'x', sizeof buf);
    CHECK(wool_last_error(buf, 5) == length);
    CHECK(strcmp(buf, "wool") == 0 && buf[5] == 'x'); /* nothing written past len */

    memset(buf, 'x', sizeof buf);
    CHECK(wool_last_error(buf, 1) == length);
    CHECK(buf[0] == '\0' && buf[1] == 'x');

    memset(buf, 'x', sizeof buf);
    CHECK(wool_last_error(buf, 0) == length);
    CHECK(buf[0] == 'x'); /* len 0: nothing written */
    CHECK(wool_last_rpc_code() == -1);
    return 0;
}

/* idle-accrues WORKER: a worker with nothing to do reports idle seconds that grow. */
static int case_idle_accrues(int argc, char **argv) {
    CHECK(argc == 1);
    wool_connection *conn = connect_plaintext(argv[0]);
    double first = -1.0, second = -1.0;
    CHECK_STATUS(wool_idle(conn, 5.0, &first), WOOL_STATUS_OK);
    sleep_seconds(0.3);
    CHECK_STATUS(wool_idle(conn, INFINITY, &second), WOOL_STATUS_OK); /* INFINITY: no deadline */
    printf("idle-accrues: %.3f s, then %.3f s\n", first, second);
    CHECK(first > 0.0);
    CHECK(second - first >= 0.29);
    wool_free(conn);
    return 0;
}

/*
 * in-flight WORKER: while a task is in flight (tests/integration/c_api.rs dispatches one), idle is exactly
 * 0.0; once it has finished, idle rises.
 */
static int case_in_flight(int argc, char **argv) {
    CHECK(argc == 1);
    wool_connection *conn = connect_plaintext(argv[0]);
    double seconds = -1.0;
    for (int i = 0; i < 5; i++) {
        CHECK_STATUS(wool_idle(conn, 5.0, &seconds), WOOL_STATUS_OK);
        CHECK(seconds == 0.0);
        sleep_seconds(0.02);
    }
    printf("in-flight: idle read exactly 0.0 five times while the task ran\n");
    double deadline = now() + 60.0;
    while (seconds == 0.0 && now() < deadline) {
        sleep_seconds(0.05);
        CHECK_STATUS(wool_idle(conn, 5.0, &seconds), WOOL_STATUS_OK);
    }
    CHECK(seconds > 0.0);
    double later = -1.0;
    sleep_seconds(0.1);
    CHECK_STATUS(wool_idle(conn, 5.0, &later), WOOL_STATUS_OK);
    printf("in-flight: after the task, idle %.3f s, then %.3f s\n", seconds, later);
    CHECK(later > seconds);
    wool_free(conn);
    return 0;
}

/* stop WORKER: wool_stop retires the worker; calls after it are WOOL_STATUS_TRANSIENT. */
static int case_stop(int argc, char **argv) {
    CHECK(argc == 1);
    wool_connection *conn = connect_plaintext(argv[0]);
    CHECK_STATUS(wool_stop(conn, 0.0, 10.0), WOOL_STATUS_OK);
    /* The worker answers the stop just before it closes its listener and connections, so an
     * idle racing that close may still be answered once; it must turn transient at once. */
    double seconds = 12345.0;
    wool_status status = WOOL_STATUS_OK;
    int answered = 0;
    for (; answered < 50; answered++) {
        status = wool_idle(conn, 2.0, &seconds);
        if (status != WOOL_STATUS_OK) break;
        sleep_seconds(0.02);
    }
    CHECK_STATUS(status, WOOL_STATUS_TRANSIENT);
    CHECK(wool_last_rpc_code() == 14); /* UNAVAILABLE */
    CHECK(strlen(last_error()) > 0);
    if (answered == 0) CHECK(seconds == 12345.0);
    CHECK_STATUS(wool_stop(conn, 0.0, 2.0), WOOL_STATUS_TRANSIENT);
    printf("stop: stopped; idle then gave %s (code %d) after %d late answer(s): %s\n",
           wool_status_name(status), (int)wool_last_rpc_code(), answered, last_error());
    wool_free(conn);
    return 0;
}

/* unimplemented WORKER: a worker without idle gives IDLE_UNAVAILABLE with code 12. */
static int case_unimplemented(int argc, char **argv) {
    CHECK(argc == 1);
    wool_connection *conn = connect_plaintext(argv[0]);
    double seconds = 12345.0;
    CHECK_STATUS(wool_idle(conn, 5.0, &seconds), WOOL_STATUS_IDLE_UNAVAILABLE);
    CHECK(wool_last_rpc_code() == 12); /* UNIMPLEMENTED */
    CHECK(seconds == 12345.0);
    CHECK(strlen(last_error()) > 0);
    printf("unimplemented: idle gave %s (code 12): %s\n",
           wool_status_name(WOOL_STATUS_IDLE_UNAVAILABLE), last_error());
    /* Such a worker still obeys stop. */
    CHECK_STATUS(wool_stop(conn, 0.0, 5.0), WOOL_STATUS_OK);
    wool_free(conn);
    return 0;
}

/* unreachable ADDRESS: nobody listens there: TRANSIENT with code 14, for idle and stop. */
static int case_unreachable(int argc, char **argv) {
    CHECK(argc == 1);
    wool_connection *conn = connect_plaintext(argv[0]); /* no I/O: succeeds */
    double seconds = 12345.0;
    CHECK_STATUS(wool_idle(conn, 5.0, &seconds), WOOL_STATUS_TRANSIENT);
    CHECK(wool_last_rpc_code() == 14); /* UNAVAILABLE */
    CHECK(seconds == 12345.0);
    printf("unreachable: idle gave WOOL_STATUS_TRANSIENT (code 14): %s\n", last_error());
    CHECK_STATUS(wool_stop(conn, 0.0, 5.0), WOOL_STATUS_TRANSIENT);
    CHECK(wool_last_rpc_code() == 14);
    wool_free(conn);
    return 0;
}

/* deadline ADDRESS: a peer that never answers: the local deadline gives TRANSIENT, code 4. */
static int case_deadline(int argc, char **argv) {
    CHECK(argc == 1);
    wool_connection *conn = connect_plaintext(argv[0]);
    double seconds = 12345.0, started = now();
    CHECK_STATUS(wool_idle(conn, 0.2, &seconds), WOOL_STATUS_TRANSIENT);
    double took = now() - started;
    CHECK(wool_last_rpc_code() == 4); /* DEADLINE_EXCEEDED */
    CHECK(seconds == 12345.0);
    CHECK(took >= 0.19 && took < 30.0);
    printf("deadline: idle gave up after %.3f s: %s\n", took, last_error());
    wool_free(conn);
    return 0;
}

/*
 * connect-timeout ADDRESS: a peer that accepts TCP and never writes a byte, reached with a 1 s
 * connect timeout: wool_idle (30 s deadline) and wool_stop (30 s grace, 60 s deadline) each end
 * at the connect timeout with TRANSIENT, code 14, the message saying the peer never spoke HTTP/2.
 */
static int case_connect_timeout(int argc, char **argv) {
    CHECK(argc == 1);
    wool_channel_options *options = NULL;
    CHECK_STATUS(wool_channel_options_new(&options), WOOL_STATUS_OK);
    CHECK_STATUS(wool_channel_options_set_connect_timeout(options, 1.0), WOOL_STATUS_OK);
    wool_connection *conn = NULL;
    CHECK_STATUS(wool_connect_with_options(argv[0], NULL, options, &conn), WOOL_STATUS_OK);
    wool_channel_options_free(options);
    double seconds = 12345.0, started = now();
    CHECK_STATUS(wool_idle(conn, 30.0, &seconds), WOOL_STATUS_TRANSIENT);
    double idle_took = now() - started;
    CHECK(wool_last_rpc_code() == 14); /* UNAVAILABLE */
    CHECK(seconds == 12345.0);
    CHECK(strstr(last_error(), "accepted the connection but never spoke HTTP/2") != NULL);
    CHECK(strstr(last_error(), "1.000 s") != NULL);
    printf("connect-timeout: idle gave up after %.3f s: %s\n", idle_took, last_error());
    started = now();
    CHECK_STATUS(wool_stop(conn, 30.0, 60.0), WOOL_STATUS_TRANSIENT);
    double stop_took = now() - started;
    CHECK(wool_last_rpc_code() == 14);
    CHECK(strstr(last_error(), "never spoke HTTP/2") != NULL);
    printf("connect-timeout: stop gave up after %.3f s: %s\n", stop_took, last_error());
    /* Generous: the deadline (30 s) and the grace (30 s) are far away. */
    CHECK(idle_took < 20.0 && stop_took < 20.0);
    wool_free(conn);
    return 0;
}

/*
 * dns-nxdomain NAME: a DNS name that does not exist: wool_discover_dns fails with TRANSIENT,
 * the message saying NAME does not resolve, and leaves `*out` untouched.
 */
static int case_dns_nxdomain(int argc, char **argv) {
    CHECK(argc == 1);
    wool_worker_list *list = (wool_worker_list *)0x1;
    CHECK_STATUS(wool_discover_dns(argv[0], 50051, 5.0, NULL, &list), WOOL_STATUS_TRANSIENT);
    CHECK(list == (wool_worker_list *)0x1);
    char says[512];
    snprintf(says, sizeof says, "%s does not resolve", argv[0]);
    CHECK(strstr(last_error(), says) != NULL);
    printf("dns-nxdomain: %s\n", last_error());
    return 0;
}

/* threads WORKER: 16 threads share one handle; each thread's last error is its own. */
enum { THREADS = 16, CALLS_PER_THREAD = 10 };

struct shared {
    const wool_connection *conn;
    int failures;
    pthread_mutex_t lock;
};

static void *poll_shared_handle(void *arg) {
    struct shared *shared = arg;
    int failures = 0;
    for (int i = 0; i < CALLS_PER_THREAD; i++) {
        double seconds = -1.0;
        if (wool_idle(shared->conn, 10.0, &seconds) != WOOL_STATUS_OK || seconds < 0.0) failures++;
    }
    /* A failure on this thread is seen by this thread only. */
    if (wool_idle(shared->conn, NAN, NULL) != WOOL_STATUS_INVALID_ARGUMENT) failures++;
    if (strstr(last_error(), "out_seconds is NULL") == NULL) failures++;
    pthread_mutex_lock(&shared->lock);
    shared->failures += failures;
    pthread_mutex_unlock(&shared->lock);
    return NULL;
}

static int case_threads(int argc, char **argv) {
    CHECK(argc == 1);
    wool_connection *conn = NULL;
    EXPECT_INVALID(wool_connect("", NULL, &conn), "empty"); /* this thread's own last error */
    conn = connect_plaintext(argv[0]);
    struct shared shared = {conn, 0, PTHREAD_MUTEX_INITIALIZER};
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++) {
        CHECK(pthread_create(&threads[i], NULL, poll_shared_handle, &shared) == 0);
    }
    for (int i = 0; i < THREADS; i++) CHECK(pthread_join(threads[i], NULL) == 0);
    CHECK(shared.failures == 0);
    CHECK(strstr(last_error(), "empty") != NULL); /* untouched by the other threads' failures */
    printf("threads: %d threads x %d idle calls on one handle, all OK\n", THREADS,
           CALLS_PER_THREAD);
    wool_free(conn);
    pthread_mutex_destroy(&shared.lock);
    return 0;
}

/* mtls WORKER CA CERT KEY: mutual TLS with the right credentials, from files and from PEM. */
static int case_mtls(int argc, char **argv) {
    CHECK(argc == 4);
    const char *worker = argv[0], *ca_path = argv[1], *cert_path = argv[2], *key_path = argv[3];
    double seconds = -1.0;

    wool_connection *from_files = connect_mutual(worker, ca_path, cert_path, key_path);
    CHECK_STATUS(wool_idle(from_files, 10.0, &seconds), WOOL_STATUS_OK);
    CHECK(seconds >= 0.0);
    wool_free(from_files);

    char *ca = read_file(ca_path), *cert = read_file(cert_path), *key = read_file(key_path);
    wool_credentials *credentials = NULL;
    CHECK_STATUS(wool_credentials_from_pem(ca, key, cert, true, "localhost", &credentials),
                 WOOL_STATUS_OK);
    wool_connection *from_pem = NULL;
    CHECK_STATUS(wool_connect(worker, credentials, &from_pem), WOOL_STATUS_OK);
    wool_credentials_free(credentials);
    CHECK_STATUS(wool_idle(from_pem, 10.0, &seconds), WOOL_STATUS_OK);
    wool_free(from_pem);

    /* An identity the worker's certificate does not carry: this client refuses the worker. */
    CHECK_STATUS(wool_credentials_from_pem(ca, key, cert, true, "wrong.example", &credentials),
                 WOOL_STATUS_OK);
    wool_connection *wrong_name = NULL;
    CHECK_STATUS(wool_connect(worker, credentials, &wrong_name), WOOL_STATUS_OK);
    wool_credentials_free(credentials);
    CHECK_STATUS(wool_idle(wrong_name, 10.0, &seconds), WOOL_STATUS_HANDSHAKE);
    printf("mtls: idle OK over mutual TLS; a wrong identity gave WOOL_STATUS_HANDSHAKE: %s\n",
           last_error());
    wool_free(wrong_name);
    free(ca);
    free(cert);
    free(key);
    return 0;
}

/* wrong-ca WORKER OTHER_CA CERT KEY: a client trusting another CA refuses the worker. */
static int case_wrong_ca(int argc, char **argv) {
    CHECK(argc == 4);
    wool_connection *conn = connect_mutual(argv[0], argv[1], argv[2], argv[3]);
    double seconds = 12345.0;
    CHECK_STATUS(wool_idle(conn, 10.0, &seconds), WOOL_STATUS_HANDSHAKE);
    CHECK(seconds == 12345.0);
    CHECK(strlen(last_error()) > 0);
    printf("wrong-ca: WOOL_STATUS_HANDSHAKE (code %d): %s\n", (int)wool_last_rpc_code(),
           last_error());
    CHECK_STATUS(wool_stop(conn, 0.0, 10.0), WOOL_STATUS_HANDSHAKE);
    wool_free(conn);
    return 0;
}

/*
 * plaintext-stop WORKER CA CERT KEY: a plaintext wool_stop against a mutual-TLS worker is
 * refused, and the worker keeps running: it still answers idle over mutual TLS.
 */
static int case_plaintext_stop(int argc, char **argv) {
    CHECK(argc == 4);
    wool_connection *plain = connect_plaintext(argv[0]);
    wool_status status = wool_stop(plain, 0.0, 10.0);
    CHECK(status != WOOL_STATUS_OK);
    printf("plaintext-stop: refused with %s (code %d): %s\n", wool_status_name(status),
           (int)wool_last_rpc_code(), last_error());
    double seconds = -1.0;
    CHECK(wool_idle(plain, 10.0, &seconds) != WOOL_STATUS_OK);
    wool_free(plain);

    wool_connection *mutual = connect_mutual(argv[0], argv[1], argv[2], argv[3]);
    CHECK_STATUS(wool_idle(mutual, 10.0, &seconds), WOOL_STATUS_OK);
    CHECK(seconds >= 0.0);
    printf("plaintext-stop: the worker still answers over mutual TLS (idle %.3f s)\n", seconds);
    wool_free(mutual);
    return 0;
}

/*
 * sigpipe WORKER CA CERT KEY ROUNDS: a host with the default SIGPIPE disposition (not ignored,
 * not blocked) is refused by a mutual-TLS worker that rejects its certificate, ROUNDS times.
 * It must see HANDSHAKE or TRANSIENT each time and live: never die of SIGPIPE (status 141).
 */
static int case_sigpipe(int argc, char **argv) {
    CHECK(argc == 5);
    struct sigaction deflt;
    memset(&deflt, 0, sizeof deflt);
    deflt.sa_handler = SIG_DFL;
    CHECK(sigaction(SIGPIPE, &deflt, NULL) == 0);
    sigset_t unblock;
    sigemptyset(&unblock);
    sigaddset(&unblock, SIGPIPE);
    CHECK(pthread_sigmask(SIG_UNBLOCK, &unblock, NULL) == 0);

    int rounds = atoi(argv[4]), handshake = 0, transient = 0;
    for (int i = 0; i < rounds; i++) {
        wool_connection *conn = connect_mutual(argv[0], argv[1], argv[2], argv[3]);
        double seconds = 12345.0;
        wool_status status = wool_idle(conn, 10.0, &seconds);
        CHECK(status == WOOL_STATUS_HANDSHAKE || status == WOOL_STATUS_TRANSIENT);
        CHECK(seconds == 12345.0);
        if (status == WOOL_STATUS_HANDSHAKE) handshake++; else transient++;
        status = wool_stop(conn, 0.0, 10.0);
        CHECK(status == WOOL_STATUS_HANDSHAKE || status == WOOL_STATUS_TRANSIENT);
        wool_free(conn);
    }
    printf("sigpipe: alive after %d rejected rounds (idle: %d handshake, %d transient); "
           "last: %s\n",
           rounds, handshake, transient, last_error());
    return 0;
}

/*
 * fork WORKER STOP_WORKER: a child forked after the library was used (while another thread of
 * the parent is in the middle of polling) uses it normally: the inherited handle and a new one
 * poll, and the child retires STOP_WORKER. The parent's connection keeps working.
 */
struct poller {
    const wool_connection *conn;
    volatile int running;
    int polls;
    int failures;
};

static void *poll_until_told(void *arg) {
    struct poller *poller = arg;
    while (poller->running) {
        double seconds = -1.0;
        if (wool_idle(poller->conn, 10.0, &seconds) != WOOL_STATUS_OK) poller->failures++;
        poller->polls++;
    }
    return NULL;
}

static int case_fork(int argc, char **argv) {
    CHECK(argc == 2);
    wool_connection *conn = connect_plaintext(argv[0]);
    double seconds = -1.0;
    CHECK_STATUS(wool_idle(conn, 5.0, &seconds), WOOL_STATUS_OK);
    struct poller poller = {conn, 1, 0, 0};
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, poll_until_told, &poller) == 0);
    while (poller.polls < 20) sleep_seconds(0.001); /* the thread is mid-poll at the fork */
    fflush(NULL);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        alarm(30); /* a hang fails the check below as death by SIGALRM */
        double inherited = -1.0, fresh = -1.0;
        wool_connection *own = NULL;
        wool_connection *retiree = NULL;
        int ok = wool_idle(conn, 5.0, &inherited) == WOOL_STATUS_OK && inherited >= 0.0 &&
                 wool_connect(argv[0], NULL, &own) == WOOL_STATUS_OK &&
                 wool_idle(own, 5.0, &fresh) == WOOL_STATUS_OK && fresh >= 0.0 &&
                 wool_connect(argv[1], NULL, &retiree) == WOOL_STATUS_OK &&
                 wool_stop(retiree, 0.0, 10.0) == WOOL_STATUS_OK;
        if (!ok) {
            fprintf(stderr, "fork child: a call failed\n");
            print_last_error();
        } else {
            printf("fork: the child polled (inherited handle %.3f s, new handle %.3f s) and "
                   "retired a worker\n", inherited, fresh);
        }
        fflush(NULL);
        _exit(ok ? 0 : 1);
    }
    int child_status = 0;
    CHECK(waitpid(child, &child_status, 0) == child);
    if (WIFSIGNALED(child_status)) /* SIGALRM (14): the child hung for 30 s */
        fprintf(stderr, "fork: the child was killed by signal %d\n", WTERMSIG(child_status));
    CHECK(WIFEXITED(child_status) && WEXITSTATUS(child_status) == 0);
    poller.running = 0;
    CHECK(pthread_join(thread, NULL) == 0);
    CHECK(poller.failures == 0);
    CHECK_STATUS(wool_idle(conn, 5.0, &seconds), WOOL_STATUS_OK); /* the parent is unaffected */
    printf("fork: the parent's thread polled %d times without a failure and the parent still "
           "polls\n", poller.polls);
    wool_free(conn);
    return 0;
}

/* ---- completion queue ------------------------------------------------------------------ */

/* Collects completions until `want` have arrived (or `limit` seconds pass); returns how many. */
static size_t collect(wool_queue *queue, wool_completion *out, size_t want, double limit) {
    size_t got = 0;
    double started = now();
    while (got < want && now() - started < limit) {
        size_t count = 0;
        CHECK_STATUS(wool_queue_next(queue, out + got, want - got, 1.0, &count), WOOL_STATUS_OK);
        got += count;
    }
    return got;
}

/* Whether the queue's descriptor is readable within `wait_ms` (poll(2)). */
static int fd_readable(const wool_queue *queue, int wait_ms) {
    struct pollfd watched = {wool_queue_fd(queue), POLLIN, 0};
    CHECK(watched.fd >= 0);
    int ready = poll(&watched, 1, wait_ms);
    CHECK(ready >= 0);
    return ready == 1 && (watched.revents & POLLIN);
}

/*
 * queue-many WORKER COUNT: one thread starts COUNT idle polls on one handle without blocking,
 * then collects them all: every tag once, all OK, 0 failures.
 */
static int case_queue_many(int argc, char **argv) {
    CHECK(argc == 2);
    size_t count = (size_t)atol(argv[1]);
    CHECK(count > 0);
    wool_connection *conn = connect_plaintext(argv[0]);
    wool_queue *queue = NULL;
    CHECK_STATUS(wool_queue_new(&queue), WOOL_STATUS_OK);
    double started = now();
    for (size_t i = 0; i < count; i++) {
        uint64_t call = 0;
        CHECK_STATUS(wool_idle_start(conn, queue, 30.0, 1000000 + i, &call), WOOL_STATUS_OK);
        CHECK(call != 0);
    }
    double all_started = now() - started;
    wool_completion *done = calloc(count, sizeof *done);
    unsigned char *seen = calloc(count, 1);
    CHECK(done != NULL && seen != NULL);
    size_t got = collect(queue, done, count, 60.0);
    CHECK(got == count);
    size_t failures = 0;
    for (size_t i = 0; i < got; i++) {
        CHECK(done[i].tag >= 1000000 && done[i].tag < 1000000 + count);
        CHECK(!seen[done[i].tag - 1000000]);
        seen[done[i].tag - 1000000] = 1;
        if (done[i].status != WOOL_STATUS_OK || done[i].seconds < 0.0) {
            if (failures++ == 0) fprintf(stderr, "first failure: %s\n", done[i].message);
        }
    }
    CHECK(failures == 0);
    CHECK(!fd_readable(queue, 0)); /* all collected: the descriptor is quiet */
    printf("queue-many: %zu polls started in %.3f s from one thread, all %zu completed OK in "
           "%.3f s\n", count, all_started, got, now() - started);
    free(done);
    free(seen);
    wool_queue_free(queue);
    wool_free(conn);
    return 0;
}

/*
 * queue-fd WORKER: the descriptor is readable exactly while completions wait (poll(2)).
 */
static int case_queue_fd(int argc, char **argv) {
    CHECK(argc == 1);
    wool_connection *conn = connect_plaintext(argv[0]);
    wool_queue *queue = NULL;
    CHECK_STATUS(wool_queue_new(&queue), WOOL_STATUS_OK);
    CHECK(!fd_readable(queue, 0));
    uint64_t call = 0;
    CHECK_STATUS(wool_idle_start(conn, queue, 10.0, 7, &call), WOOL_STATUS_OK);
    CHECK(fd_readable(queue, 10000));
    CHECK(fd_readable(queue, 0)); /* level-triggered: still readable until collected */
    wool_completion done[4];
    size_t count = 0;
    CHECK_STATUS(wool_queue_next(queue, done, 4, 0.0, &count), WOOL_STATUS_OK);
    CHECK(count == 1 && done[0].tag == 7 && done[0].call == call);
    CHECK(done[0].status == WOOL_STATUS_OK && done[0].seconds >= 0.0 && done[0].message[0] == 0);
    CHECK(!fd_readable(queue, 0));
    CHECK_STATUS(wool_queue_next(queue, done, 4, 0.0, &count), WOOL_STATUS_OK);
    CHECK(count == 0); /* nothing waits: returns at once */
    double started = now();
    CHECK_STATUS(wool_queue_next(queue, done, 4, 0.2, &count), WOOL_STATUS_OK);
    CHECK(count == 0 && now() - started >= 0.19);
    /* bad input */
    EXPECT_INVALID(wool_queue_new(NULL), "out is NULL");
    EXPECT_INVALID(wool_queue_next(queue, NULL, 4, 0.0, &count), "out is NULL");
    EXPECT_INVALID(wool_queue_next(queue, done, 4, NAN, &count), "timeout");
    EXPECT_INVALID(wool_queue_next(queue, done, 4, -1.0, &count), "timeout");
    EXPECT_INVALID(wool_queue_next(NULL, done, 4, 0.0, &count), "queue is NULL");
    EXPECT_INVALID(wool_idle_start(conn, NULL, 1.0, 1, &call), "queue is NULL");
    EXPECT_INVALID(wool_idle_start(NULL, queue, 1.0, 1, &call), "conn is NULL");
    EXPECT_INVALID(wool_idle_start(conn, queue, 0.0, 1, &call), "timeout");
    EXPECT_INVALID(wool_idle_start(conn, queue, 1.0, 1, NULL), "out_call is NULL");
    EXPECT_INVALID(wool_stop_start(conn, queue, NAN, 1.0, 1, &call), "grace");
    EXPECT_INVALID(wool_cancel(NULL, call), "queue is NULL");
    CHECK(wool_queue_fd(NULL) == -1);
    CHECK_STATUS(wool_queue_next(queue, done, 4, 0.0, &count), WOOL_STATUS_OK);
    CHECK(count == 0); /* the refused starts started nothing */
    printf("queue-fd: readable exactly while a completion waited\n");
    wool_queue_free(queue);
    wool_queue_free(NULL);
    wool_free(conn);
    return 0;
}

/*
 * queue-cancel SILENT WORKER: cancel before any answer (SILENT never answers) completes the
 * call at once with WOOL_STATUS_CANCELLED; cancelling a completed call or an unknown id
 * changes nothing; a stop started without blocking retires WORKER.
 */
static int case_queue_cancel(int argc, char **argv) {
    CHECK(argc == 2);
    wool_connection *silent = connect_plaintext(argv[0]);
    wool_connection *conn = connect_plaintext(argv[1]);
    wool_queue *queue = NULL;
    CHECK_STATUS(wool_queue_new(&queue), WOOL_STATUS_OK);
    wool_completion done[4];
    size_t count = 0;
    /* during: the call is waiting for an answer that never comes */
    uint64_t hanging = 0;
    CHECK_STATUS(wool_idle_start(silent, queue, INFINITY, 1, &hanging), WOOL_STATUS_OK);
    sleep_seconds(0.3);
    double started = now();
    CHECK_STATUS(wool_cancel(queue, hanging), WOOL_STATUS_OK);
    CHECK_STATUS(wool_queue_next(queue, done, 4, 0.0, &count), WOOL_STATUS_OK);
    CHECK(count == 1 && done[0].tag == 1 && done[0].status == WOOL_STATUS_CANCELLED);
    CHECK(done[0].rpc_code == 1 && strstr(done[0].message, "cancel") != NULL);
    CHECK(now() - started < 1.0);
    /* before: cancelled right after starting (toward the silent peer, so that the call cannot
     * have completed first: a live worker may answer before the cancel is made) */
    uint64_t early = 0;
    CHECK_STATUS(wool_idle_start(silent, queue, 10.0, 2, &early), WOOL_STATUS_OK);
    CHECK_STATUS(wool_cancel(queue, early), WOOL_STATUS_OK);
    CHECK(collect(queue, done, 1, 120.0) == 1);
    if (!(done[0].tag == 2 && done[0].status == WOOL_STATUS_CANCELLED)) {
        fprintf(stderr, "early cancel: tag %llu, %s: %s\n", (unsigned long long)done[0].tag,
                wool_status_name(done[0].status), done[0].message);
    }
    CHECK(done[0].tag == 2 && done[0].status == WOOL_STATUS_CANCELLED);
    /* after: completed first, then cancelled: nothing more arrives */
    uint64_t finished = 0;
    CHECK_STATUS(wool_idle_start(conn, queue, 10.0, 3, &finished), WOOL_STATUS_OK);
    CHECK(collect(queue, done, 1, 120.0) == 1);
    CHECK(done[0].tag == 3 && done[0].status == WOOL_STATUS_OK);
    CHECK_STATUS(wool_cancel(queue, finished), WOOL_STATUS_OK);
    CHECK_STATUS(wool_cancel(queue, 987654321), WOOL_STATUS_OK);
    CHECK_STATUS(wool_queue_next(queue, done, 4, 0.3, &count), WOOL_STATUS_OK);
    CHECK(count == 0);
    /* a stop, without blocking */
    uint64_t stop = 0;
    CHECK_STATUS(wool_stop_start(conn, queue, 0.0, 10.0, 4, &stop), WOOL_STATUS_OK);
    CHECK(collect(queue, done, 1, 120.0) == 1);
    CHECK(done[0].tag == 4 && done[0].status == WOOL_STATUS_OK);
    printf("queue-cancel: cancelled during (%.3f s) and before; after and unknown ids ignored; "
           "stop completed\n", now() - started);
    wool_queue_free(queue);
    wool_free(silent);
    wool_free(conn);
    return 0;
}

/*
 * queue-batch SILENT WORKER: 300 idle polls started in one wool_idle_start_batch, three of them
 * refused on their own (a freed handle, a NaN timeout, a zero timeout) and one toward SILENT
 * (which never answers): the others start, every entry completes once under its tag and call
 * id (the refused ones at once, with their message), the silent one when cancelled; a batch
 * one past WOOL_IDLE_START_BATCH_MAX and NULL arrays are refused whole, starting nothing.
 * The polls' deadlines and the waits for them are 300 s: every poll of a batch starts at once,
 * and under valgrind on a busy 2-core machine the worker answers a few hundred a minute, so a
 * shorter deadline measured the machine; a wait returns as soon as everything has come.
 */
static int case_queue_batch(int argc, char **argv) {
    CHECK(argc == 2);
    enum { COUNT = 300, FREED = 3, NAN_TIMEOUT = 5, ZERO_TIMEOUT = 6, SILENT = 7, TAG = 5000 };
    wool_connection *silent = connect_plaintext(argv[0]);
    wool_connection *conn = connect_plaintext(argv[1]);
    wool_connection *freed = connect_plaintext(argv[1]);
    wool_free(freed);
    wool_queue *queue = NULL;
    CHECK_STATUS(wool_queue_new(&queue), WOOL_STATUS_OK);
    wool_idle_start_entry entries[COUNT];
    for (size_t i = 0; i < COUNT; i++) {
        entries[i] = (wool_idle_start_entry){conn, 300.0, TAG + i};
    }
    entries[FREED].conn = freed;
    entries[NAN_TIMEOUT].timeout_seconds = NAN;
    entries[ZERO_TIMEOUT].timeout_seconds = 0.0;
    entries[SILENT] = (wool_idle_start_entry){silent, INFINITY, TAG + SILENT};
    uint64_t calls[COUNT];
    wool_status statuses[COUNT];
    CHECK_STATUS(wool_idle_start_batch(queue, entries, COUNT, calls, statuses), WOOL_STATUS_OK);
    CHECK(strstr(last_error(), "entries[3].conn") != NULL); /* the first refusal */
    for (size_t i = 0; i < COUNT; i++) {
        int refused = i == FREED || i == NAN_TIMEOUT || i == ZERO_TIMEOUT;
        CHECK(statuses[i] == (refused ? WOOL_STATUS_INVALID_ARGUMENT : WOOL_STATUS_OK));
        CHECK(calls[i] != 0);
        for (size_t j = 0; j < i; j++) CHECK(calls[j] != calls[i]);
    }
    wool_completion done[COUNT];
    CHECK(collect(queue, done, COUNT - 1, 300.0) == COUNT - 1); /* all but the silent one */
    unsigned char seen[COUNT] = {0};
    for (size_t k = 0; k < COUNT - 1; k++) {
        CHECK(done[k].tag >= TAG && done[k].tag < TAG + COUNT);
        size_t i = done[k].tag - TAG;
        CHECK(i != SILENT && !seen[i]);
        seen[i] = 1;
        CHECK(done[k].call == calls[i]);
        CHECK(done[k].status == statuses[i]);
        if (i == FREED) {
            CHECK(strstr(done[k].message, "entries[3].conn: connection handle already freed"));
        } else if (i == NAN_TIMEOUT || i == ZERO_TIMEOUT) {
            CHECK(strstr(done[k].message, "timeout") != NULL);
        } else {
            CHECK(done[k].seconds >= 0.0 && done[k].message[0] == 0);
        }
    }
    CHECK_STATUS(wool_cancel(queue, calls[SILENT]), WOOL_STATUS_OK);
    CHECK(collect(queue, done, 1, 120.0) == 1);
    CHECK(done[0].tag == TAG + SILENT && done[0].call == calls[SILENT]);
    CHECK(done[0].status == WOOL_STATUS_CANCELLED);
    /* refused whole: nothing started, nothing written */
    size_t too_many = WOOL_IDLE_START_BATCH_MAX + 1;
    wool_idle_start_entry *many = calloc(too_many, sizeof *many);
    uint64_t *many_calls = calloc(too_many, sizeof *many_calls);
    wool_status *many_statuses = calloc(too_many, sizeof *many_statuses);
    CHECK(many != NULL && many_calls != NULL && many_statuses != NULL);
    for (size_t i = 0; i < too_many; i++) many[i] = (wool_idle_start_entry){conn, 300.0, i};
    EXPECT_INVALID(wool_idle_start_batch(queue, many, too_many, many_calls, many_statuses),
                   "WOOL_IDLE_START_BATCH_MAX");
    CHECK(many_calls[0] == 0 && many_statuses[0] == 0);
    CHECK_STATUS(wool_idle_start_batch(queue, many, WOOL_IDLE_START_BATCH_MAX, many_calls,
                                       many_statuses), WOOL_STATUS_OK); /* the bound itself */
    wool_completion *many_done = calloc(WOOL_IDLE_START_BATCH_MAX, sizeof *many_done);
    CHECK(many_done != NULL);
    CHECK(collect(queue, many_done, WOOL_IDLE_START_BATCH_MAX, 300.0) == WOOL_IDLE_START_BATCH_MAX);
    for (size_t i = 0; i < WOOL_IDLE_START_BATCH_MAX; i++) CHECK(many_done[i].status == WOOL_STATUS_OK);
    EXPECT_INVALID(wool_idle_start_batch(NULL, entries, 1, calls, statuses), "queue is NULL");
    EXPECT_INVALID(wool_idle_start_batch(queue, NULL, 1, calls, statuses), "entries is NULL");
    EXPECT_INVALID(wool_idle_start_batch(queue, entries, 1, NULL, statuses), "out_calls is NULL");
    EXPECT_INVALID(wool_idle_start_batch(queue, entries, 1, calls, NULL), "out_statuses is NULL");
    CHECK_STATUS(wool_idle_start_batch(queue, NULL, 0, NULL, NULL), WOOL_STATUS_OK);
    size_t count = 0;
    CHECK_STATUS(wool_queue_next(queue, done, 4, 0.3, &count), WOOL_STATUS_OK);
    CHECK(count == 0); /* the refused batches started nothing */
    wool_queue *gone = NULL;
    CHECK_STATUS(wool_queue_new(&gone), WOOL_STATUS_OK);
    wool_queue_free(gone);
    EXPECT_INVALID(wool_idle_start_batch(gone, entries, 1, calls, statuses), "already freed");
    printf("queue-batch: %d polls in one start (3 refused, 1 cancelled), %d at the bound; "
           "refused whole: %zu, NULL arrays, a freed queue\n", COUNT, WOOL_IDLE_START_BATCH_MAX,
           too_many);
    free(many);
    free(many_calls);
    free(many_statuses);
    free(many_done);
    wool_queue_free(queue);
    wool_free(silent);
    wool_free(conn);
    return 0;
}

/*
 * queue-free SILENT WORKER: a queue freed with calls in flight (to a peer that never answers
 * and to a live worker), and a handle freed while its calls are in flight (they complete).
 */
static int case_queue_free(int argc, char **argv) {
    CHECK(argc == 2);
    wool_queue *doomed = NULL, *queue = NULL;
    CHECK_STATUS(wool_queue_new(&doomed), WOOL_STATUS_OK);
    CHECK_STATUS(wool_queue_new(&queue), WOOL_STATUS_OK);
    wool_connection *silent = connect_plaintext(argv[0]);
    wool_connection *conn = connect_plaintext(argv[1]);
    uint64_t call = 0;
    for (int i = 0; i < 100; i++) {
        CHECK_STATUS(wool_idle_start(silent, doomed, INFINITY, (uint64_t)i, &call), WOOL_STATUS_OK);
        CHECK_STATUS(wool_idle_start(conn, doomed, 10.0, (uint64_t)i, &call), WOOL_STATUS_OK);
    }
    wool_queue_free(doomed); /* cancels what is in flight, discards the rest */
    for (int i = 0; i < 50; i++) {
        CHECK_STATUS(wool_idle_start(conn, queue, 10.0, (uint64_t)i, &call), WOOL_STATUS_OK);
    }
    wool_free(conn); /* the calls in flight keep what they need */
    wool_completion done[50];
    CHECK(collect(queue, done, 50, 120.0) == 50);
    for (int i = 0; i < 50; i++) CHECK(done[i].status == WOOL_STATUS_OK);
    wool_queue_free(queue);
    wool_free(silent);
    sleep_seconds(0.3); /* let the runtime drop the aborted calls before the leak check */
    printf("queue-free: a queue freed with 200 calls in flight; a handle freed under 50 calls "
           "that all completed\n");
    return 0;
}

/*
 * idle-many WORKER LEGACY SILENT DEADLINE: one blocking call polls a fleet: the live worker's
 * handle (several times), a worker without idle, a silent peer, and a NULL handle.
 */
static int case_idle_many(int argc, char **argv) {
    CHECK(argc == 4);
    double deadline = atof(argv[3]);
    CHECK(deadline > 0.0);
    wool_connection *conn = connect_plaintext(argv[0]);
    wool_connection *legacy = connect_plaintext(argv[1]);
    wool_connection *silent = connect_plaintext(argv[2]);
    enum { N = 1000 };
    const wool_connection **fleet = calloc(N, sizeof *fleet);
    double *seconds = calloc(N, sizeof *seconds);
    wool_status *statuses = calloc(N, sizeof *statuses);
    int32_t *codes = calloc(N, sizeof *codes);
    CHECK(fleet && seconds && statuses && codes);
    for (int i = 0; i < N; i++) fleet[i] = conn;
    fleet[1] = legacy;
    fleet[2] = silent;
    fleet[3] = NULL;
    double started = now();
    CHECK_STATUS(wool_idle_many(fleet, N, deadline, 64, seconds, statuses, codes), WOOL_STATUS_OK);
    double took = now() - started;
    CHECK(statuses[0] == WOOL_STATUS_OK && seconds[0] >= 0.0 && codes[0] == -1);
    CHECK(statuses[1] == WOOL_STATUS_IDLE_UNAVAILABLE && codes[1] == 12 && isnan(seconds[1]));
    /* The silent peer: the deadline (4), or under valgrind's 30 s deadline the connect
     * timeout's 20 s default (14: it accepted the connection and never spoke HTTP/2). */
    CHECK(statuses[2] == WOOL_STATUS_TRANSIENT && (codes[2] == 4 || codes[2] == 14));
    CHECK(statuses[3] == WOOL_STATUS_INVALID_ARGUMENT);
    for (int i = 4; i < N; i++) CHECK(statuses[i] == WOOL_STATUS_OK);
    CHECK(took < deadline + 30.0);
    EXPECT_INVALID(wool_idle_many(fleet, N, 2.0, 0, seconds, statuses, NULL), "max_in_flight");
    EXPECT_INVALID(wool_idle_many(NULL, N, 2.0, 8, seconds, statuses, NULL), "NULL");
    EXPECT_INVALID(wool_idle_many(fleet, N, 0.0, 8, seconds, statuses, NULL), "timeout");
    CHECK_STATUS(wool_idle_many(NULL, 0, 1.0, 8, NULL, NULL, NULL), WOOL_STATUS_OK);
    printf("idle-many: %d handles in one call (64 in flight, %g s deadline) in %.3f s: live OK, "
           "legacy IDLE_UNAVAILABLE, silent TRANSIENT (deadline or connect timeout), NULL INVALID_ARGUMENT\n", N,
           deadline, took);
    free(fleet);
    free(seconds);
    free(statuses);
    free(codes);
    wool_free(conn);
    wool_free(legacy);
    wool_free(silent);
    return 0;
}

/*
 * sweep-start WORKER SILENT: wool_idle_many_start. A sweep completes once into the queue
 * (collected as wool_completion_ex: kind SWEEP, count) with one result per handle; a sweep
 * cancelled, and one whose queue is freed, never write their results afterwards (each array is
 * freed at once, so that valgrind sees any later write); handles freed under a sweep are kept
 * by it; wool_queue_next_sized takes the 0.4 size too.
 */
static int case_sweep_start(int argc, char **argv) {
    CHECK(argc == 2);
    wool_connection *conn = connect_plaintext(argv[0]);
    wool_connection *silent = connect_plaintext(argv[1]);
    wool_queue *queue = NULL;
    CHECK_STATUS(wool_queue_new(&queue), WOOL_STATUS_OK);
    wool_completion_ex done[4];
    size_t count = 0;
    /* a sweep that completes: three polls of the worker and a NULL handle */
    const wool_connection *fleet[4] = {conn, conn, NULL, conn};
    wool_poll_result *results = malloc(4 * sizeof *results);
    CHECK(results != NULL);
    uint64_t call = 0;
    CHECK_STATUS(wool_idle_many_start(fleet, 4, 60.0, 2, queue, 11, results, &call),
                 WOOL_STATUS_OK);
    double started = now();
    size_t got = 0;
    while (got == 0 && now() - started < 60.0) {
        CHECK_STATUS(wool_queue_next_sized(queue, done, 4, sizeof done[0], 1.0, &got),
                     WOOL_STATUS_OK);
    }
    CHECK(got == 1 && done[0].completion.tag == 11 && done[0].completion.call == call);
    CHECK(done[0].completion.status == WOOL_STATUS_OK);
    CHECK(done[0].kind == WOOL_COMPLETION_KIND_SWEEP && done[0].count == 4);
    for (int i = 0; i < 4; i++) {
        if (i == 2) {
            CHECK(results[i].status == WOOL_STATUS_INVALID_ARGUMENT && isnan(results[i].seconds));
            CHECK(strstr(results[i].message, "NULL") != NULL);
        } else {
            CHECK(results[i].status == WOOL_STATUS_OK && results[i].seconds >= 0.0);
            CHECK(results[i].rpc_code == -1 && results[i].message[0] == 0);
        }
    }
    free(results);
    /* cancelled mid-sweep (the silent peer never answers), then right after a start: one
     * CANCELLED completion each, and the array freed as soon as wool_cancel returns */
    const wool_connection *mixed[2] = {silent, conn};
    for (int round = 0; round < 2; round++) {
        results = malloc(2 * sizeof *results);
        CHECK(results != NULL);
        CHECK_STATUS(wool_idle_many_start(mixed, 2, 60.0, 2, queue, 20 + round, results, &call),
                     WOOL_STATUS_OK);
        if (round == 0) sleep_seconds(0.3);
        CHECK_STATUS(wool_cancel(queue, call), WOOL_STATUS_OK);
        free(results);
        CHECK_STATUS(wool_queue_next_sized(queue, done, 4, sizeof done[0], 0.0, &count),
                     WOOL_STATUS_OK);
        CHECK(count == 1 && done[0].completion.tag == (uint64_t)(20 + round));
        CHECK(done[0].completion.status == WOOL_STATUS_CANCELLED);
        CHECK(done[0].kind == WOOL_COMPLETION_KIND_SWEEP && done[0].count == 0);
    }
    /* handles freed under a sweep: it keeps what it needs */
    wool_connection *own = connect_plaintext(argv[0]);
    const wool_connection *owned[3] = {own, own, own};
    results = malloc(3 * sizeof *results);
    CHECK(results != NULL);
    CHECK_STATUS(wool_idle_many_start(owned, 3, 60.0, 3, queue, 30, results, &call),
                 WOOL_STATUS_OK);
    wool_free(own);
    /* the 0.4 size: a prefix of wool_completion_ex */
    wool_completion old[4];
    started = now();
    got = 0;
    while (got == 0 && now() - started < 60.0) {
        CHECK_STATUS(wool_queue_next_sized(queue, old, 4, sizeof old[0], 1.0, &got),
                     WOOL_STATUS_OK);
    }
    CHECK(got == 1 && old[0].tag == 30 && old[0].status == WOOL_STATUS_OK);
    for (int i = 0; i < 3; i++) CHECK(results[i].status == WOOL_STATUS_OK);
    free(results);
    EXPECT_INVALID(wool_queue_next_sized(queue, old, 4, sizeof old[0] - 1, 0.0, &count),
                   "completion_size");
    wool_poll_result spare[4];
    EXPECT_INVALID(wool_idle_many_start(fleet, 4, 1.0, 0, queue, 1, spare, &call), "max_in_flight");
    EXPECT_INVALID(wool_idle_many_start(fleet, 4, 1.0, 2, queue, 1, NULL, &call), "NULL");
    EXPECT_INVALID(wool_idle_many_start(fleet, 4, 1.0, 2, NULL, 1, spare, &call), "queue is NULL");
    /* a queue freed with sweeps in flight (one of the worker, which would soon finish): the
     * arrays are freed right after it */
    wool_queue *doomed = NULL;
    CHECK_STATUS(wool_queue_new(&doomed), WOOL_STATUS_OK);
    wool_poll_result *lost[2];
    for (int i = 0; i < 2; i++) {
        lost[i] = malloc(2 * sizeof *lost[i]);
        CHECK(lost[i] != NULL);
    }
    const wool_connection *live[2] = {conn, conn};
    CHECK_STATUS(wool_idle_many_start(live, 2, 60.0, 2, doomed, 1, lost[0], &call),
                 WOOL_STATUS_OK);
    CHECK_STATUS(wool_idle_many_start(mixed, 2, 60.0, 2, doomed, 2, lost[1], &call),
                 WOOL_STATUS_OK);
    wool_queue_free(doomed);
    free(lost[0]);
    free(lost[1]);
    CHECK_STATUS(wool_queue_next(queue, old, 4, 0.5, &count), WOOL_STATUS_OK);
    CHECK(count == 0);
    printf("sweep-start: one completion per sweep with its results; cancelled and freed sweeps "
           "never wrote theirs\n");
    wool_queue_free(queue);
    wool_free(conn);
    wool_free(silent);
    sleep_seconds(0.3); /* let the runtime drop the aborted calls before the leak check */
    return 0;
}

/*
 * version CARGO_VERSION: the header's version macros agree with each other, with
 * wool_version() (the library this program runs against) and with Cargo.toml's version.
 */
static int case_version(int argc, char **argv) {
    CHECK(argc == 1);
    char expected[64];
    snprintf(expected, sizeof expected, "%d.%d.%d", WOOL_VERSION_MAJOR, WOOL_VERSION_MINOR,
             WOOL_VERSION_PATCH);
    CHECK(strcmp(expected, WOOL_VERSION_STRING) == 0);
    CHECK(strcmp(WOOL_VERSION_STRING, argv[0]) == 0);
    CHECK(strcmp(wool_version(), WOOL_VERSION_STRING) == 0);
    CHECK(WOOL_VERSION_NUMBER ==
          WOOL_VERSION_MAJOR * 1000000 + WOOL_VERSION_MINOR * 1000 + WOOL_VERSION_PATCH);
#if WOOL_VERSION_NUMBER < 1000
#error "WOOL_VERSION_NUMBER must be usable in #if"
#endif
    printf("version: header %s (%d), library %s, Cargo.toml %s\n", WOOL_VERSION_STRING,
           WOOL_VERSION_NUMBER, wool_version(), argv[0]);
    return 0;
}

/*
 * options WORKER: every channel-option setter refuses bad values naming the option (the
 * options stay usable), good values are taken, and a connection made with them polls.
 */
static int case_options(int argc, char **argv) {
    CHECK(argc == 1);
    EXPECT_INVALID(wool_channel_options_new(NULL), "out is NULL");
    wool_channel_options *o = NULL;
    CHECK_STATUS(wool_channel_options_new(&o), WOOL_STATUS_OK);
    EXPECT_INVALID(wool_channel_options_set_keepalive_interval(NULL, 1.0), "options is NULL");
    EXPECT_INVALID(wool_channel_options_set_max_concurrent_streams(NULL, 1), "options is NULL");
    const double bad_seconds[] = {0.0, -1.0, NAN, -INFINITY, 0.0001};
    for (size_t i = 0; i < sizeof bad_seconds / sizeof bad_seconds[0]; i++) {
        double v = bad_seconds[i];
        EXPECT_INVALID(wool_channel_options_set_keepalive_interval(o, v), "keepalive_interval");
        EXPECT_INVALID(wool_channel_options_set_keepalive_timeout(o, v), "keepalive_timeout");
        EXPECT_INVALID(wool_channel_options_set_connect_timeout(o, v), "connect_timeout");
    }
    EXPECT_INVALID(wool_channel_options_set_keepalive_timeout(o, INFINITY), "keepalive_timeout");
    EXPECT_INVALID(wool_channel_options_set_max_receive_message_bytes(o, 0),
                   "max_receive_message_bytes");
    EXPECT_INVALID(wool_channel_options_set_max_send_message_bytes(o, SIZE_MAX),
                   "max_send_message_bytes");
    EXPECT_INVALID(wool_channel_options_set_max_concurrent_streams(o, 0), "max_concurrent_streams");
    EXPECT_INVALID(wool_channel_options_set_max_concurrent_streams(o, SIZE_MAX),
                   "max_concurrent_streams");
    CHECK_STATUS(wool_channel_options_set_keepalive_interval(o, INFINITY), WOOL_STATUS_OK);
    CHECK_STATUS(wool_channel_options_set_keepalive_interval(o, 10.0), WOOL_STATUS_OK);
    CHECK_STATUS(wool_channel_options_set_keepalive_timeout(o, 0.001), WOOL_STATUS_OK);
    CHECK_STATUS(wool_channel_options_set_keepalive_without_calls(o, false), WOOL_STATUS_OK);
    CHECK_STATUS(wool_channel_options_set_max_pings_without_data(o, 0), WOOL_STATUS_OK);
    CHECK_STATUS(wool_channel_options_set_max_receive_message_bytes(o, 1024), WOOL_STATUS_OK);
    CHECK_STATUS(wool_channel_options_set_max_send_message_bytes(o, 1024), WOOL_STATUS_OK);
    CHECK_STATUS(wool_channel_options_set_max_concurrent_streams(o, 4), WOOL_STATUS_OK);
    CHECK_STATUS(wool_channel_options_set_connect_timeout(o, INFINITY), WOOL_STATUS_OK);
    wool_connection *conn = NULL;
    EXPECT_INVALID(wool_connect_with_options(NULL, NULL, o, &conn), "target is NULL");
    EXPECT_INVALID(wool_connect_with_options(argv[0], NULL, o, NULL), "out is NULL");
    CHECK(conn == NULL);
    CHECK_STATUS(wool_connect_with_options(argv[0], NULL, o, &conn), WOOL_STATUS_OK);
    wool_channel_options_free(o);
    wool_channel_options_free(NULL);
    double seconds = -1.0;
    CHECK_STATUS(wool_idle(conn, 5.0, &seconds), WOOL_STATUS_OK);
    wool_free(conn);
    CHECK_STATUS(wool_connect_with_options(argv[0], NULL, NULL, &conn), WOOL_STATUS_OK);
    CHECK_STATUS(wool_idle(conn, 5.0, &seconds), WOOL_STATUS_OK);
    wool_free(conn);
    printf("options: bad values refused naming the option; a connection with options polls\n");
    return 0;
}

/*
 * frozen WORKER PID: keepalive 1 s / 1 s; the worker is frozen (SIGSTOP) under a call with no
 * deadline: the call ends TRANSIENT, naming keepalive; once thawed, the next call succeeds on
 * a new connection.
 */
static int case_frozen(int argc, char **argv) {
    CHECK(argc == 2);
    pid_t worker = (pid_t)atol(argv[1]);
    CHECK(worker > 0);
    wool_channel_options *options = NULL;
    CHECK_STATUS(wool_channel_options_new(&options), WOOL_STATUS_OK);
    CHECK_STATUS(wool_channel_options_set_keepalive_interval(options, 1.0), WOOL_STATUS_OK);
    CHECK_STATUS(wool_channel_options_set_keepalive_timeout(options, 1.0), WOOL_STATUS_OK);
    wool_connection *conn = NULL;
    CHECK_STATUS(wool_connect_with_options(argv[0], NULL, options, &conn), WOOL_STATUS_OK);
    wool_channel_options_free(options); /* the handle keeps its own copy */
    double seconds = -1.0;
    CHECK_STATUS(wool_idle(conn, 5.0, &seconds), WOOL_STATUS_OK);
    CHECK(kill(worker, SIGSTOP) == 0);
    double untouched = 12345.0, started = now();
    wool_status status = wool_idle(conn, INFINITY, &untouched);
    double took = now() - started;
    CHECK(kill(worker, SIGCONT) == 0);
    CHECK_STATUS(status, WOOL_STATUS_TRANSIENT);
    CHECK(wool_last_rpc_code() == 14); /* UNAVAILABLE */
    CHECK(strstr(last_error(), "keepalive") != NULL);
    CHECK(untouched == 12345.0);
    CHECK(took < 30.0);
    printf("frozen: wool_idle(INFINITY) gave WOOL_STATUS_TRANSIENT after %.3f s: %s\n", took,
           last_error());
    CHECK_STATUS(wool_idle(conn, 10.0, &seconds), WOOL_STATUS_OK);
    printf("frozen: thawed, the next poll succeeded (idle %.3f s)\n", seconds);
    wool_free(conn);
    return 0;
}

/* one-way WORKER CA: one-way TLS: the client verifies the worker and presents nothing. */
static int case_one_way(int argc, char **argv) {
    CHECK(argc == 2);
    wool_credentials *credentials = NULL;
    CHECK_STATUS(wool_credentials_from_files(argv[1], NULL, NULL, false, NULL, &credentials),
                 WOOL_STATUS_OK);
    wool_connection *conn = NULL;
    CHECK_STATUS(wool_connect(argv[0], credentials, &conn), WOOL_STATUS_OK);
    wool_credentials_free(credentials);
    double seconds = -1.0;
    CHECK_STATUS(wool_idle(conn, 10.0, &seconds), WOOL_STATUS_OK);
    CHECK(seconds >= 0.0);
    printf("one-way: idle %.3f s over one-way TLS\n", seconds);
    wool_free(conn);
    return 0;
}

/* stop-grace WORKER GRACE: wool_stop with this grace (no deadline); prints how long it took. */
static int case_stop_grace(int argc, char **argv) {
    CHECK(argc == 2);
    char *end = NULL;
    double grace = strtod(argv[1], &end);
    CHECK(end != argv[1] && *end == '\0');
    wool_connection *conn = connect_plaintext(argv[0]);
    double started = now();
    CHECK_STATUS(wool_stop(conn, grace, INFINITY), WOOL_STATUS_OK);
    printf("stop-grace: wool_stop(grace %g) answered after %.3f s\n", grace, now() - started);
    wool_free(conn);
    return 0;
}

/*
 * discover NAMESPACE COUNT: wool_discover lists a real Wool pool's COUNT workers with every
 * field filled; each is reached through wool_connect_worker and answers wool_idle; bad inputs
 * are refused with messages; list accessors are safe on NULL and out-of-range indexes.
 */
static int case_discover(int argc, char **argv) {
    CHECK(argc == 2);
    size_t expected = (size_t)atoi(argv[1]);
    wool_worker_list *list = NULL;
    CHECK_STATUS(wool_discover(argv[0], WOOL_DISCOVERY_LOCAL, 0.0, &list), WOOL_STATUS_OK);
    CHECK(wool_worker_list_count(list) == expected);
    for (size_t i = 0; i < expected; i++) {
        const wool_worker_info *w = wool_worker_list_get(list, i);
        CHECK(w != NULL);
        CHECK(strlen(w->uid) == 36 && strncmp(w->address, "127.0.0.1:", 10) == 0);
        CHECK(w->pid > 0 && strcmp(w->version, "0.15.7") == 0);
        CHECK(strcmp(w->tags_json, "[]") == 0 && strcmp(w->extra_json, "{}") == 0);
        CHECK(!w->secure && strcmp(w->identity, "") == 0);
        wool_connection *conn = NULL;
        CHECK_STATUS(wool_connect_worker(w, NULL, NULL, &conn), WOOL_STATUS_OK);
        double idle = -1.0;
        CHECK_STATUS(wool_idle(conn, 5.0, &idle), WOOL_STATUS_OK);
        CHECK(idle >= 0.0);
        wool_free(conn);
    }
    CHECK(wool_worker_list_get(list, expected) == NULL);
    CHECK(wool_worker_list_get(NULL, 0) == NULL);
    CHECK(wool_worker_list_count(NULL) == 0);
    /* A worker that advertises TLS needs credentials; a host may fill the struct itself. */
    wool_worker_info secure = {0};
    secure.address = "127.0.0.1:1";
    secure.identity = "worker.example";
    secure.secure = true;
    wool_connection *conn = NULL;
    EXPECT_INVALID(wool_connect_worker(&secure, NULL, NULL, &conn), "credentials");
    secure.secure = false;
    secure.address = "not a target";
    EXPECT_INVALID(wool_connect_worker(&secure, NULL, NULL, &conn), "target");
    secure.address = NULL;
    EXPECT_INVALID(wool_connect_worker(&secure, NULL, NULL, &conn), "address");
    EXPECT_INVALID(wool_connect_worker(NULL, NULL, NULL, &conn), "worker");
    CHECK(conn == NULL);
    wool_worker_list *untouched = (wool_worker_list *)0x1;
    EXPECT_INVALID(wool_discover(NULL, WOOL_DISCOVERY_LOCAL, 0.0, &untouched), "namespace");
    EXPECT_INVALID(wool_discover("", WOOL_DISCOVERY_LOCAL, 0.0, &untouched), "namespace");
    EXPECT_INVALID(wool_discover("\xff", WOOL_DISCOVERY_LOCAL, 0.0, &untouched), "UTF-8");
    EXPECT_INVALID(wool_discover(argv[0], 7, 0.0, &untouched), "backend");
    EXPECT_INVALID(wool_discover(argv[0], WOOL_DISCOVERY_LAN, NAN, &untouched), "listen_seconds");
    EXPECT_INVALID(wool_discover(argv[0], WOOL_DISCOVERY_LAN, -1.0, &untouched), "listen_seconds");
    EXPECT_INVALID(wool_discover(argv[0], WOOL_DISCOVERY_LAN, 1e300, &untouched), "listen_seconds");
    EXPECT_INVALID(wool_discover(argv[0], WOOL_DISCOVERY_LOCAL, 0.0, NULL), "out");
    CHECK(untouched == (wool_worker_list *)0x1);
    wool_worker_list *none = NULL;
    CHECK_STATUS(wool_discover("libwool-harness-no-such-pool", WOOL_DISCOVERY_LOCAL, 0.0, &none),
                 WOOL_STATUS_OK);
    CHECK(wool_worker_list_count(none) == 0);
    wool_worker_list_free(none);
    printf("discover: %zu workers of namespace %s, each polled through wool_connect_worker\n",
           expected, argv[0]);
    wool_worker_list_free(list);
    wool_worker_list_free(NULL);
    return 0;
}

/*
 * watch NAMESPACE COUNT: a watch on a running pool first reports its COUNT workers as ADDED,
 * then nothing (NONE with a NULL worker at a 0 timeout); bad inputs are refused.
 */
static int case_watch(int argc, char **argv) {
    CHECK(argc == 2);
    int expected = atoi(argv[1]);
    wool_watch *watch = NULL;
    CHECK_STATUS(wool_watch_new(argv[0], WOOL_DISCOVERY_LOCAL, &watch), WOOL_STATUS_OK);
    int added = 0;
    double started = now();
    while (added < expected) {
        int kind = -1;
        const wool_worker_info *worker = NULL;
        CHECK_STATUS(wool_watch_next(watch, 15.0, &kind, &worker), WOOL_STATUS_OK);
        CHECK(kind == WOOL_DISCOVERY_EVENT_ADDED);
        CHECK(worker != NULL && strncmp(worker->address, "127.0.0.1:", 10) == 0);
        added++;
        CHECK(now() - started < 30.0);
    }
    int kind = -1;
    const wool_worker_info *worker = (const wool_worker_info *)0x1;
    CHECK_STATUS(wool_watch_next(watch, 0.0, &kind, &worker), WOOL_STATUS_OK);
    CHECK(kind == WOOL_DISCOVERY_EVENT_NONE && worker == NULL);
    EXPECT_INVALID(wool_watch_next(watch, NAN, &kind, &worker), "timeout");
    EXPECT_INVALID(wool_watch_next(watch, -1.0, &kind, &worker), "timeout");
    EXPECT_INVALID(wool_watch_next(NULL, 1.0, &kind, &worker), "watch");
    EXPECT_INVALID(wool_watch_next(watch, 1.0, NULL, &worker), "out_kind");
    wool_watch *untouched = (wool_watch *)0x1;
    EXPECT_INVALID(wool_watch_new("", WOOL_DISCOVERY_LOCAL, &untouched), "namespace");
    EXPECT_INVALID(wool_watch_new(argv[0], -1, &untouched), "backend");
    CHECK(untouched == (wool_watch *)0x1);
    wool_watch_free(watch);
    wool_watch_free(NULL);
    printf("watch: %d workers reported as added\n", added);
    return 0;
}

/*
 * retire A B C: three idle workers, started in that order. A dry run decides all three idle
 * and stops nothing; keeping one retires A and B (the most idle) and keeps C for the minimum;
 * bad policies are refused and nothing is stopped.
 */
static int case_retire(int argc, char **argv) {
    CHECK(argc == 3);
    const wool_connection *fleet[4];
    for (int i = 0; i < 3; i++) fleet[i] = connect_plaintext(argv[i]);
    fleet[3] = NULL;
    wool_retire_decision out[4];
    wool_retire_policy policy = {
        .idle_threshold = 0.2, .grace = 0.0, .stop_timeout = 10.0,
        .keep_min = 1, .max_stops = SIZE_MAX, .dry_run = true,
    };
    CHECK_STATUS(wool_retire_idle(fleet, 4, &policy, 5.0, 8, out), WOOL_STATUS_OK);
    for (int i = 0; i < 2; i++) {
        CHECK(out[i].reason == WOOL_RETIRE_REASON_IDLE && out[i].retire && !out[i].stopped);
        CHECK(out[i].poll_status == WOOL_STATUS_OK && out[i].idle_seconds >= 0.2);
    }
    CHECK(out[2].reason == WOOL_RETIRE_REASON_MINIMUM && !out[2].retire);
    CHECK(out[3].reason == WOOL_RETIRE_REASON_POLL_FAILED);
    CHECK(out[3].poll_status == WOOL_STATUS_INVALID_ARGUMENT && isnan(out[3].idle_seconds));
    CHECK(strstr(out[3].message, "conns[3] is NULL") != NULL);
    CHECK(strcmp(out[0].message, "") == 0);
    wool_retire_policy bad = policy;
    bad.grace = 10.0;
    EXPECT_INVALID(wool_retire_idle(fleet, 3, &bad, 5.0, 8, out), "grace");
    bad = policy;
    bad.idle_threshold = NAN;
    EXPECT_INVALID(wool_retire_idle(fleet, 3, &bad, 5.0, 8, out), "idle_threshold");
    bad = policy;
    bad.idle_threshold = 1.733640380551062e208; /* found by fuzz/c_api: finite, too large */
    EXPECT_INVALID(wool_retire_idle(fleet, 3, &bad, 5.0, 8, out), "idle_threshold");
    bad = policy;
    bad.grace = NAN;
    EXPECT_INVALID(wool_retire_idle(fleet, 3, &bad, 5.0, 8, out), "grace");
    EXPECT_INVALID(wool_retire_idle(fleet, 3, NULL, 5.0, 8, out), "policy");
    EXPECT_INVALID(wool_retire_idle(fleet, 3, &policy, 0.0, 8, out), "timeout");
    EXPECT_INVALID(wool_retire_idle(fleet, 3, &policy, 5.0, 0, out), "max_in_flight");
    EXPECT_INVALID(wool_retire_idle(fleet, 3, &policy, 5.0, 8, NULL), "NULL");
    CHECK_STATUS(wool_retire_idle(NULL, 0, &policy, 5.0, 8, NULL), WOOL_STATUS_OK);
    policy.dry_run = false;
    CHECK_STATUS(wool_retire_idle(fleet, 3, &policy, 5.0, 8, out), WOOL_STATUS_OK);
    for (int i = 0; i < 2; i++) {
        CHECK(out[i].retire && out[i].stopped && out[i].stop_status == WOOL_STATUS_OK);
        CHECK(out[i].stop_rpc_code == -1);
    }
    CHECK(!out[2].retire && !out[2].stopped && out[2].reason == WOOL_RETIRE_REASON_MINIMUM);
    CHECK(strcmp(wool_retire_reason_name(WOOL_RETIRE_REASON_IDLE), "idle") == 0);
    CHECK(strcmp(wool_retire_reason_name(WOOL_RETIRE_REASON_BELOW_THRESHOLD), "below-threshold") == 0);
    CHECK(strcmp(wool_retire_reason_name(WOOL_RETIRE_REASON_POLL_FAILED), "poll-failed") == 0);
    CHECK(strcmp(wool_retire_reason_name(99), "unknown") == 0);
    CHECK(strcmp(wool_retire_reason_name(-1), "unknown") == 0);
    printf("retire: dry run stopped nothing; keeping 1 retired %s and %s, kept %s (%s)\n",
           argv[0], argv[1], argv[2], wool_retire_reason_name(out[2].reason));
    for (int i = 0; i < 3; i++) wool_free((wool_connection *)fleet[i]);
    return 0;
}

/*
 * reload WORKER_A WORKER_B CA CERT KEY NEXT_CA NEXT_CERT NEXT_KEY: credentials from files that
 * are read again when they change. CA/CERT/KEY (the client's files) trust and present worker A's
 * CA, NEXT_* worker B's. Polls A; the files are replaced (rename, as rotations do) by NEXT_*;
 * within about a second the same connections poll B and refuse A (whose CA is no longer
 * trusted); then a garbage key file is refused and the material in force kept.
 */
static int case_reload(int argc, char **argv) {
    CHECK(argc == 8);
    const char *worker_a = argv[0], *worker_b = argv[1];
    const char *ca = argv[2], *cert = argv[3], *key = argv[4];
    const char *next_ca = argv[5], *next_cert = argv[6], *next_key = argv[7];
    wool_credentials *credentials = NULL;
    double seconds = -1.0;

    EXPECT_INVALID(wool_credentials_from_files_reloadable(NULL, key, cert, true, NULL, &credentials),
                   "ca_path");
    EXPECT_INVALID(wool_credentials_from_files_reloadable(ca, NULL, cert, true, NULL, &credentials),
                   "key_path");
    EXPECT_INVALID(wool_credentials_from_files_reloadable(ca, key, cert, true, NULL, NULL), "out");
    EXPECT_INVALID(wool_credentials_from_files_reloadable("/nonexistent/ca.pem", key, cert, true,
                                                          NULL, &credentials),
                   "/nonexistent/ca.pem");
    EXPECT_INVALID(wool_credentials_from_files_reloadable(ca, key, cert, true, "not a name!",
                                                          &credentials),
                   "identity");
    CHECK(credentials == NULL);

    CHECK_STATUS(wool_credentials_from_files_reloadable(ca, key, cert, true, NULL, &credentials),
                 WOOL_STATUS_OK);
    wool_connection *to_a = NULL, *to_b = NULL;
    CHECK_STATUS(wool_connect(worker_a, credentials, &to_a), WOOL_STATUS_OK);
    CHECK_STATUS(wool_connect(worker_b, credentials, &to_b), WOOL_STATUS_OK);
    wool_credentials_free(credentials); /* the connections keep their own copy */
    CHECK_STATUS(wool_idle(to_a, 10.0, &seconds), WOOL_STATUS_OK);
    CHECK_STATUS(wool_idle(to_b, 10.0, &seconds), WOOL_STATUS_HANDSHAKE);

    CHECK(rename(next_ca, ca) == 0);
    CHECK(rename(next_cert, cert) == 0);
    CHECK(rename(next_key, key) == 0);
    double rotated = now(), took = 0.0;
    wool_status status;
    while ((status = wool_idle(to_b, 10.0, &seconds)) != WOOL_STATUS_OK) {
        CHECK(status == WOOL_STATUS_HANDSHAKE);
        took = now() - rotated;
        CHECK(took < 5.0);
        sleep_seconds(0.05);
    }
    took = now() - rotated;
    CHECK_STATUS(wool_idle(to_a, 10.0, &seconds), WOOL_STATUS_HANDSHAKE);
    printf("reload: B answered %.2f s after the files were replaced; A refused: %s\n", took,
           last_error());

    FILE *garbage = fopen(key, "w");
    CHECK(garbage != NULL);
    fputs("not a key\n", garbage);
    fclose(garbage);
    sleep_seconds(1.2);
    for (int i = 0; i < 5; i++) CHECK_STATUS(wool_idle(to_b, 10.0, &seconds), WOOL_STATUS_OK);
    printf("reload: a garbage key file was refused; B still answers\n");
    wool_free(to_a);
    wool_free(to_b);
    return 0;
}

/* The wool_status named `name` (as wool_status_name spells it). */
static wool_status status_named(const char *name) {
    for (int value = 0; value <= 7; value++) {
        if (strcmp(wool_status_name((wool_status)value), name) == 0) return (wool_status)value;
    }
    fprintf(stderr, "harness.c: no status is named %s\n", name);
    exit(2);
}

/*
 * hostile ADDRESS STATUS CODE TIMEOUT MARGIN [CA]: a fake worker that misbehaves (garbage, a
 * huge answer, GOAWAY, silence, an absurd certificate chain; tests/common/hostile.rs, served by
 * the test process). wool_idle and then wool_stop, each with TIMEOUT seconds, over one-way TLS
 * trusting the CA file when one is given: each gives STATUS (a status name) with gRPC code CODE
 * and a non-empty last error, leaves *out_seconds untouched, and returns within TIMEOUT +
 * MARGIN seconds.
 */
static int case_hostile(int argc, char **argv) {
    CHECK(argc == 5 || argc == 6);
    wool_status expected = status_named(argv[1]);
    int code = atoi(argv[2]);
    double timeout = atof(argv[3]), margin = atof(argv[4]);
    CHECK(timeout > 0.0 && margin > 0.0);
    wool_connection *conn = NULL;
    if (argc == 6) {
        wool_credentials *credentials = NULL;
        CHECK_STATUS(wool_credentials_from_files(argv[5], NULL, NULL, false, NULL, &credentials),
                     WOOL_STATUS_OK);
        CHECK_STATUS(wool_connect(argv[0], credentials, &conn), WOOL_STATUS_OK);
        wool_credentials_free(credentials);
    } else {
        conn = connect_plaintext(argv[0]);
    }
    double seconds = 12345.0, started = now();
    CHECK_STATUS(wool_idle(conn, timeout, &seconds), expected);
    double took = now() - started;
    CHECK(wool_last_rpc_code() == code);
    CHECK(strlen(last_error()) > 0);
    CHECK(seconds == 12345.0);
    CHECK(took < timeout + margin);
    printf("hostile: idle gave %s (code %d) after %.3f s: %s\n", wool_status_name(expected), code,
           took, last_error());
    started = now();
    CHECK_STATUS(wool_stop(conn, 0.0, timeout), expected);
    took = now() - started;
    CHECK(wool_last_rpc_code() == code);
    CHECK(strlen(last_error()) > 0);
    CHECK(took < timeout + margin);
    printf("hostile: stop gave %s (code %d) after %.3f s: %s\n", wool_status_name(expected), code,
           took, last_error());
    wool_free(conn);
    return 0;
}

/*
 * A freed handle, or one of another type, as every call that takes a handle meets it: refused
 * as WOOL_STATUS_INVALID_ARGUMENT naming the parameter, never read; a second free changes
 * nothing but the thread's last error. `function_about` is what the free's last error says.
 */
static void expect_free_refused(int line, const char *about) {
    if (strstr(last_error(), about) == NULL || wool_last_rpc_code() != -1) {
        fprintf(stderr, "harness.c:%d: expected a last error about \"%s\"\n", line, about);
        print_last_error();
        exit(1);
    }
}
#define EXPECT_FREE_REFUSED(about) expect_free_refused(__LINE__, (about))

/*
 * handles WORKER CA NAMESPACE: every handle type (connection, queue, credentials, channel
 * options, worker list, watch) used after its free, freed twice, and passed where another type
 * is expected: each is refused with its status and message, and the live handles beside it go
 * on working. NAMESPACE is one with no pool (its listing and watch are empty).
 */
static int case_handles(int argc, char **argv) {
    CHECK(argc == 3);
    const char *worker = argv[0], *namespace_ = argv[2];
    char *ca = read_file(argv[1]);
    double seconds = -1.0;
    uint64_t call = 0;
    size_t count = 0;
    wool_completion done[1];

    wool_connection *conn = connect_plaintext(worker);
    wool_queue *queue = NULL;
    CHECK_STATUS(wool_queue_new(&queue), WOOL_STATUS_OK);
    wool_credentials *credentials = NULL;
    CHECK_STATUS(wool_credentials_from_pem(ca, NULL, NULL, false, NULL, &credentials),
                 WOOL_STATUS_OK);
    wool_channel_options *options = NULL;
    CHECK_STATUS(wool_channel_options_new(&options), WOOL_STATUS_OK);
    wool_worker_list *list = NULL;
    CHECK_STATUS(wool_discover(namespace_, WOOL_DISCOVERY_LOCAL, 0.0, &list), WOOL_STATUS_OK);
    CHECK(wool_worker_list_count(list) == 0);
    wool_watch *watch = NULL;
    CHECK_STATUS(wool_watch_new(namespace_, WOOL_DISCOVERY_LOCAL, &watch), WOOL_STATUS_OK);

    /* Wrong types: refused, naming both types; the handle passed stays alive. */
    EXPECT_INVALID(wool_idle((const wool_connection *)queue, 5.0, &seconds),
                   "conn is a queue handle, not a connection handle");
    EXPECT_INVALID(wool_stop((const wool_connection *)credentials, 0.0, 5.0),
                   "conn is a credentials handle, not a connection handle");
    EXPECT_INVALID(wool_idle_start(conn, (const wool_queue *)conn, 5.0, 1, &call),
                   "queue is a connection handle, not a queue handle");
    EXPECT_INVALID(wool_queue_next((const wool_queue *)watch, done, 1, 0.0, &count),
                   "queue is a watch handle, not a queue handle");
    EXPECT_INVALID(wool_connect(worker, (const wool_credentials *)options, &conn),
                   "credentials is a channel options handle, not a credentials handle");
    EXPECT_INVALID(wool_channel_options_set_connect_timeout((wool_channel_options *)list, 1.0),
                   "options is a worker list handle, not a channel options handle");
    EXPECT_INVALID(wool_watch_next((const wool_watch *)list, 0.0, &(int){0},
                                   &(const wool_worker_info *){NULL}),
                   "watch is a worker list handle, not a watch handle");
    CHECK(wool_worker_list_count((const wool_worker_list *)watch) == 0);
    EXPECT_FREE_REFUSED("list is a watch handle, not a worker list handle");
    CHECK(wool_queue_fd((const wool_queue *)options) == -1);
    EXPECT_FREE_REFUSED("queue is a channel options handle, not a queue handle");
    wool_free((wool_connection *)queue);
    EXPECT_FREE_REFUSED("wool_free: conn is a queue handle, not a connection handle");
    wool_queue_free((wool_queue *)conn);
    EXPECT_FREE_REFUSED("wool_queue_free: queue is a connection handle, not a queue handle");
    wool_credentials_free((wool_credentials *)watch);
    EXPECT_FREE_REFUSED("credentials is a watch handle");
    wool_channel_options_free((wool_channel_options *)credentials);
    EXPECT_FREE_REFUSED("options is a credentials handle");
    wool_worker_list_free((wool_worker_list *)options);
    EXPECT_FREE_REFUSED("list is a channel options handle");
    wool_watch_free((wool_watch *)list);
    EXPECT_FREE_REFUSED("watch is a worker list handle");
    /* A value no handle ever had: an address. */
    EXPECT_INVALID(wool_idle((const wool_connection *)&seconds, 5.0, &seconds),
                   "conn is not a connection handle made by libwool");
    /* Every handle still works after all that. */
    CHECK_STATUS(wool_idle(conn, 5.0, &seconds), WOOL_STATUS_OK);
    CHECK_STATUS(wool_queue_next(queue, done, 1, 0.0, &count), WOOL_STATUS_OK);
    CHECK(wool_queue_fd(queue) >= 0);
    CHECK_STATUS(wool_channel_options_set_connect_timeout(options, 2.0), WOOL_STATUS_OK);
    wool_connection *other = NULL;
    CHECK_STATUS(wool_connect_with_options(worker, credentials, options, &other), WOOL_STATUS_OK);
    wool_free(other);
    int kind = -1;
    const wool_worker_info *info = NULL;
    CHECK_STATUS(wool_watch_next(watch, 0.0, &kind, &info), WOOL_STATUS_OK);
    CHECK(kind == WOOL_DISCOVERY_EVENT_NONE);

    /* Connection: used after its free, in a sweep, freed twice. */
    wool_free(conn);
    EXPECT_INVALID(wool_idle(conn, 5.0, &seconds), "conn: connection handle already freed");
    EXPECT_INVALID(wool_stop(conn, 0.0, 5.0), "conn: connection handle already freed");
    EXPECT_INVALID(wool_idle_start(conn, queue, 5.0, 1, &call),
                   "conn: connection handle already freed");
    const wool_connection *fleet[1] = {conn};
    wool_status statuses[1] = {WOOL_STATUS_OK};
    double fleet_seconds[1] = {0.0};
    CHECK_STATUS(wool_idle_many(fleet, 1, 5.0, 1, fleet_seconds, statuses, NULL),
                 WOOL_STATUS_OK);
    CHECK(statuses[0] == WOOL_STATUS_INVALID_ARGUMENT && isnan(fleet_seconds[0]));
    wool_free(conn);
    EXPECT_FREE_REFUSED("wool_free: conn: connection handle already freed");

    /* Credentials and options: their connections keep their copies. */
    wool_credentials_free(credentials);
    EXPECT_INVALID(wool_connect(worker, credentials, &other),
                   "credentials: credentials handle already freed");
    wool_credentials_free(credentials);
    EXPECT_FREE_REFUSED("wool_credentials_free: credentials: credentials handle already freed");
    wool_channel_options_free(options);
    EXPECT_INVALID(wool_channel_options_set_keepalive_interval(options, 5.0),
                   "options: channel options handle already freed");
    EXPECT_INVALID(wool_connect_with_options(worker, NULL, options, &other),
                   "options: channel options handle already freed");
    wool_channel_options_free(options);
    EXPECT_FREE_REFUSED("options: channel options handle already freed");

    /* Worker list and watch. */
    wool_worker_list_free(list);
    CHECK(wool_worker_list_count(list) == 0);
    EXPECT_FREE_REFUSED("wool_worker_list_count: list: worker list handle already freed");
    CHECK(wool_worker_list_get(list, 0) == NULL);
    EXPECT_FREE_REFUSED("wool_worker_list_get: list: worker list handle already freed");
    wool_worker_list_free(list);
    EXPECT_FREE_REFUSED("wool_worker_list_free: list: worker list handle already freed");
    wool_watch_free(watch);
    EXPECT_INVALID(wool_watch_next(watch, 0.0, &kind, &info), "watch: watch handle already freed");
    wool_watch_free(watch);
    EXPECT_FREE_REFUSED("wool_watch_free: watch: watch handle already freed");

    /* Queue last: every queue call refuses it. */
    wool_queue_free(queue);
    EXPECT_INVALID(wool_queue_next(queue, done, 1, 0.0, &count), "queue: queue handle already freed");
    EXPECT_INVALID(wool_cancel(queue, 1), "queue: queue handle already freed");
    CHECK(wool_queue_fd(queue) == -1);
    EXPECT_FREE_REFUSED("wool_queue_fd: queue: queue handle already freed");
    wool_queue_free(queue);
    EXPECT_FREE_REFUSED("wool_queue_free: queue: queue handle already freed");

    free(ca);
    printf("handles: 6 types refused after their free, freed twice and as the wrong type\n");
    return 0;
}

/* A thread polling one shared handle until the handle is freed under it. */
struct busy {
    const wool_connection *conn;
    double timeout;
    atomic_int *started;
    int ok, after_free, other; /* the statuses it saw */
};

static void *poll_until_freed(void *arg) {
    struct busy *busy = arg;
    atomic_fetch_add(busy->started, 1);
    for (;;) {
        double seconds = 0.0;
        wool_status status = wool_idle(busy->conn, busy->timeout, &seconds);
        if (status == WOOL_STATUS_OK) {
            busy->ok++;
        } else if (status == WOOL_STATUS_INVALID_ARGUMENT &&
                   strstr(last_error(), "connection handle already freed") != NULL) {
            busy->after_free++;
            return NULL;
        } else {
            busy->other++; /* a silent peer's deadline: the call ran on after the free */
            if (status != WOOL_STATUS_TRANSIENT) {
                fprintf(stderr, "free-while-busy: wool_idle gave %s\n", wool_status_name(status));
                print_last_error();
                return NULL;
            }
        }
    }
}

/* A thread waiting in wool_queue_next (or a watch's next) until the handle is freed under it. */
struct waiter {
    wool_queue *queue;
    wool_watch *watch;
    atomic_int *started;
    wool_status status;
    size_t count;
    int kind;
    char message[256];
};

static void *wait_until_freed(void *arg) {
    struct waiter *waiter = arg;
    atomic_fetch_add(waiter->started, 1);
    if (waiter->queue != NULL) {
        wool_completion done[4];
        waiter->count = 99;
        waiter->status = wool_queue_next(waiter->queue, done, 4, INFINITY, &waiter->count);
    } else {
        const wool_worker_info *info = NULL;
        waiter->kind = -1;
        waiter->status = wool_watch_next(waiter->watch, INFINITY, &waiter->kind, &info);
    }
    snprintf(waiter->message, sizeof waiter->message, "%s",
             waiter->status == WOOL_STATUS_OK ? "" : last_error());
    return NULL;
}

/* Either outcome of a wait whose handle was freed: it was waiting (OK, nothing) or it came
 * after the free (refused as freed). */
static void check_waiter(const struct waiter *waiter, const char *freed) {
    if (waiter->status == WOOL_STATUS_OK) {
        CHECK(waiter->queue == NULL || waiter->count == 0);
        CHECK(waiter->queue != NULL || waiter->kind == WOOL_DISCOVERY_EVENT_NONE);
    } else {
        CHECK(waiter->status == WOOL_STATUS_INVALID_ARGUMENT);
        CHECK(strstr(waiter->message, freed) != NULL);
    }
}

/*
 * free-while-busy WORKER SILENT NAMESPACE: a connection freed while 4 threads poll it in a loop
 * (a live worker) and while 4 threads are in polls that cannot finish before it (a silent peer,
 * 1 s deadline); a queue freed while a thread waits in wool_queue_next with no deadline and
 * calls are in flight on it; a watch freed while a thread waits in wool_watch_next. Every call
 * ends with its status (OK, the deadline's TRANSIENT, or INVALID_ARGUMENT once freed), every
 * wait ends, and nothing leaks.
 */
static int case_free_while_busy(int argc, char **argv) {
    CHECK(argc == 3);
    enum { POLLERS = 4 };
    atomic_int started = 0;

    const char *targets[2] = {argv[0], argv[1]};
    for (int round = 0; round < 2; round++) {
        wool_connection *conn = connect_plaintext(targets[round]);
        struct busy busy[POLLERS];
        pthread_t threads[POLLERS];
        atomic_store(&started, 0);
        for (int i = 0; i < POLLERS; i++) {
            busy[i] = (struct busy){conn, round == 0 ? 10.0 : 1.0, &started, 0, 0, 0};
            CHECK(pthread_create(&threads[i], NULL, poll_until_freed, &busy[i]) == 0);
        }
        while (atomic_load(&started) < POLLERS) sleep_seconds(0.01);
        sleep_seconds(0.2); /* every thread in or between calls */
        wool_free(conn);
        int ok = 0, after_free = 0, ran_on = 0;
        for (int i = 0; i < POLLERS; i++) {
            CHECK(pthread_join(threads[i], NULL) == 0);
            CHECK(busy[i].after_free == 1); /* each thread's next call after the free */
            ok += busy[i].ok;
            ran_on += busy[i].other;
            after_free += busy[i].after_free;
        }
        CHECK(round == 1 || ran_on == 0);
        CHECK(round == 0 || ok == 0);
        printf("free-while-busy: %s: %d polls OK, %d ran to their deadline, then %d refused as "
               "freed\n",
               round == 0 ? "worker" : "silent peer", ok, ran_on, after_free);
    }

    /* A queue, with a thread waiting and calls in flight to the silent peer. */
    wool_queue *queue = NULL;
    CHECK_STATUS(wool_queue_new(&queue), WOOL_STATUS_OK);
    wool_connection *silent = connect_plaintext(argv[1]);
    uint64_t call = 0;
    for (int i = 0; i < 8; i++) {
        CHECK_STATUS(wool_idle_start(silent, queue, INFINITY, (uint64_t)i, &call), WOOL_STATUS_OK);
    }
    wool_free(silent); /* the calls keep what they need */
    atomic_store(&started, 0);
    struct waiter queue_waiter = {.queue = queue, .started = &started};
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, wait_until_freed, &queue_waiter) == 0);
    while (atomic_load(&started) < 1) sleep_seconds(0.01);
    sleep_seconds(0.3);
    wool_queue_free(queue);
    CHECK(pthread_join(thread, NULL) == 0);
    check_waiter(&queue_waiter, "queue: queue handle already freed");

    /* A watch. */
    wool_watch *watch = NULL;
    CHECK_STATUS(wool_watch_new(argv[2], WOOL_DISCOVERY_LOCAL, &watch), WOOL_STATUS_OK);
    atomic_store(&started, 0);
    struct waiter watch_waiter = {.watch = watch, .started = &started};
    CHECK(pthread_create(&thread, NULL, wait_until_freed, &watch_waiter) == 0);
    while (atomic_load(&started) < 1) sleep_seconds(0.01);
    sleep_seconds(0.3);
    wool_watch_free(watch);
    CHECK(pthread_join(thread, NULL) == 0);
    check_waiter(&watch_waiter, "watch: watch handle already freed");

    sleep_seconds(0.3); /* let the runtime drop the aborted calls before the leak check */
    printf("free-while-busy: the queue's wait ended %s, the watch's %s\n",
           queue_waiter.status == WOOL_STATUS_OK ? "empty" : "refused",
           watch_waiter.status == WOOL_STATUS_OK ? "empty" : "refused");
    return 0;
}

struct named_case {
    const char *name;
    int (*run)(int argc, char **argv);
};

static const struct named_case cases[] = {
    {"names", case_names},
    {"invalid", case_invalid},
    {"last-error", case_last_error},
    {"idle-accrues", case_idle_accrues},
    {"in-flight", case_in_flight},
    {"stop", case_stop},
    {"unimplemented", case_unimplemented},
    {"unreachable", case_unreachable},
    {"deadline", case_deadline},
    {"connect-timeout", case_connect_timeout},
    {"dns-nxdomain", case_dns_nxdomain},
    {"threads", case_threads},
    {"mtls", case_mtls},
    {"wrong-ca", case_wrong_ca},
    {"plaintext-stop", case_plaintext_stop},
    {"sigpipe", case_sigpipe},
    {"fork", case_fork},
    {"frozen", case_frozen},
    {"options", case_options},
    {"version", case_version},
    {"queue-many", case_queue_many},
    {"queue-fd", case_queue_fd},
    {"queue-cancel", case_queue_cancel},
    {"queue-batch", case_queue_batch},
    {"queue-free", case_queue_free},
    {"idle-many", case_idle_many},
    {"sweep-start", case_sweep_start},
    {"one-way", case_one_way},
    {"stop-grace", case_stop_grace},
    {"discover", case_discover},
    {"watch", case_watch},
    {"retire", case_retire},
    {"reload", case_reload},
    {"hostile", case_hostile},
    {"handles", case_handles},
    {"free-while-busy", case_free_while_busy},
};

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 2) {
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            if (strcmp(argv[1], cases[i].name) == 0) return cases[i].run(argc - 2, argv + 2);
        }
    }
    fprintf(stderr, "usage: harness CASE ARGS...; cases:");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) fprintf(stderr, " %s", cases[i].name);
    fprintf(stderr, "\n");
    return 2;
}
