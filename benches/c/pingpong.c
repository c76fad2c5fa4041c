/* pingpong: the floor (g) — a one-byte TCP ping-pong between two processes on loopback.
 *
 *   pingpong N WARMUP [CLIENT_CPU SERVER_CPU]
 *
 * The parent listens on 127.0.0.1:0, forks a child that connects; both set TCP_NODELAY. The
 * parent writes one byte and blocks until the child writes it back, N times after WARMUP
 * round trips. Prints what `idle_bench seq` prints: the N round trips' durations (samples_ns)
 * and the wall and CPU time of the timed loop (the client half's CPU), as records (timing.h);
 * benches/run.py computes the statistics. Not a test.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <sched.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "timing.h"

static void nodelay(int fd) {
    int one = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0) { perror("TCP_NODELAY"); exit(1); }
}

static void pin(const char *cpu) { /* pin the calling process to one CPU */
    if (!cpu) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(atoi(cpu), &set);
    if (sched_setaffinity(0, sizeof set, &set) < 0) { perror("sched_setaffinity"); exit(1); }
}

static void exchange(int fd) { /* write one byte, read one byte */
    char b = 'x';
    if (write(fd, &b, 1) != 1 || read(fd, &b, 1) != 1) { perror("pingpong"); exit(1); }
}

int main(int argc, char **argv) {
    if (argc != 3 && argc != 5) { fprintf(stderr, "usage: pingpong N WARMUP [CLIENT_CPU SERVER_CPU]\n"); return 2; }
    const char *client_cpu = argc == 5 ? argv[3] : NULL, *server_cpu = argc == 5 ? argv[4] : NULL;
    size_t n = strtoull(argv[1], NULL, 10), warmup = strtoull(argv[2], NULL, 10);
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (bind(listener, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(listener, 1) < 0 ||
        getsockname(listener, (struct sockaddr *)&addr, &len) < 0) { perror("listen"); return 1; }
    pid_t child = fork();
    if (child == 0) { /* the echoing peer */
        pin(server_cpu);
        close(listener);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) { perror("connect"); _exit(1); }
        nodelay(fd);
        char b;
        while (read(fd, &b, 1) == 1)
            if (write(fd, &b, 1) != 1) break;
        _exit(0);
    }
    pin(client_cpu);
    int fd = accept(listener, NULL, NULL);
    if (fd < 0) { perror("accept"); return 1; }
    nodelay(fd);
    for (size_t i = 0; i < warmup; i++) exchange(fd);
    uint64_t *samples = malloc(n * sizeof *samples);
    double cpu = process_cpu();
    uint64_t start = now_ns();
    for (size_t i = 0; i < n; i++) {
        uint64_t t = now_ns();
        exchange(fd);
        samples[i] = now_ns() - t;
    }
    double elapsed = (double)(now_ns() - start) / 1e9;
    cpu = process_cpu() - cpu;
    close(fd);
    waitpid(child, NULL, 0);
    put_latency(samples, n, elapsed, cpu);
    free(samples);
    return 0;
}
