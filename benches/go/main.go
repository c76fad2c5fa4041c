// Command wool-bench-go: sequential idle polls through the Go binding (bindings/go), for
// scripts/bench.sh (see BENCHMARKS.md). Not a test: nothing here asserts on time.
//
//	wool-bench-go ADDR N WARMUP
//
// Polls with context.Background() (no deadline: the binding then calls wool_idle on the
// calling goroutine, with no helper goroutine), and prints one line of JSON on stdout.
// The binding finds libwool through pkg-config; scripts/bench.sh writes a wool.pc for the
// release build (target/release) and builds this with it:
//
//	PKG_CONFIG_PATH=DIR-OF-THAT-wool.pc go build -o BIN .
package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"syscall"
	"time"

	wool "github.com/libwool/libwool/bindings/go"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: wool-bench-go ADDR N WARMUP")
		os.Exit(2)
	}
	addr := os.Args[1]
	n, err1 := strconv.Atoi(os.Args[2])
	warmup, err2 := strconv.Atoi(os.Args[3])
	if err1 != nil || err2 != nil || n < 1 || warmup < 0 {
		fmt.Fprintln(os.Stderr, "wool-bench-go: N and WARMUP are counts")
		os.Exit(2)
	}
	conn, err := wool.Connect(addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "wool-bench-go:", err)
		os.Exit(1)
	}
	defer conn.Close()
	ctx := context.Background()
	for i := 0; i < warmup; i++ {
		if _, err := conn.Idle(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "wool-bench-go:", err)
			os.Exit(1)
		}
	}
	samples := make([]int64, n)
	cpu := processCPU()
	start := time.Now()
	for i := range samples {
		t := time.Now()
		if _, err := conn.Idle(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "wool-bench-go:", err)
			os.Exit(1)
		}
		samples[i] = time.Since(t).Nanoseconds()
	}
	elapsed := time.Since(start).Seconds()
	cpu = processCPU() - cpu
	var sum int64
	for _, s := range samples {
		sum += s
	}
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	pick := func(q float64) float64 {
		i := int(math.Ceil(q * float64(n)))
		if i < 1 {
			i = 1
		}
		if i > n {
			i = n
		}
		return float64(samples[i-1]) / 1e3
	}
	fmt.Printf("{\"n\":%d,\"median_us\":%.2f,\"p99_us\":%.2f,\"mean_us\":%.2f,\"min_us\":%.2f,\"polls_per_s\":%.1f,\"cpu_us_per_poll\":%.2f}\n",
		n, pick(0.5), pick(0.99), float64(sum)/float64(n)/1e3, float64(samples[0])/1e3, float64(n)/elapsed,
		cpu*1e6/float64(n))
}

// processCPU is this process's user + system CPU time (all threads), in seconds.
func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
