// Command wool-bench-go: idle polls through the Go binding (bindings/go), for scripts/bench.sh
// (see BENCHMARKS.md). Not a test: nothing here asserts on time.
//
//	wool-bench-go ADDR N WARMUP                sequential polls, one at a time (layer (d))
//	wool-bench-go seq ADDR N WARMUP            the same
//	wool-bench-go burst ADDR LEVELS SECONDS    bursts of N goroutines polling at once on ONE
//	                                           Connection (LEVELS like 1,16,256,10000)
//	wool-bench-go sweep ADDRFILE MAX SWEEPS [TIMEOUT]
//	                                           IdleMany over one Connection per address in
//	                                           ADDRFILE, MAX in flight, one deadline of TIMEOUT s
//	                                           (default 30) per sweep: 1 cold sweep (connections
//	                                           made) + SWEEPS warm ones, in this one process
//
// Every poll is Connection.Idle, which starts the call on the library's completion queue
// (wool_idle_start) and waits on a channel fed by the binding's one dispatcher goroutine, so a
// waiting goroutine holds no OS thread: a burst of 10,000 runs on a handful of threads.
// seq polls with context.Background() (no deadline); burst gives each poll a 60 s deadline, as
// the Rust and grpc-go burst drivers do.
//
// Output: one line of JSON on stdout, as benches/harness writes it (the keys of the Rust driver,
// benches/wool_bench.rs, which benches/run.py turns into statistics). seq as `seq-conn` (a
// harness.Latency); burst as `burst` (harness.Bursts with "os_threads_max": the most OS threads
// this process had during the bursts); sweep as `sweep` ({"endpoints","concurrency",
// "sweep_ns":[cold, warm...],"failures":[per sweep],"first_error"}).
//
// The binding finds libwool through pkg-config; scripts/bench.sh writes a wool.pc for the
// release build (target/release) and builds this with it:
//
//	PKG_CONFIG_PATH=DIR-OF-THAT-wool.pc go build -o BIN .
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/libwool/libwool/benches/harness"
	wool "github.com/libwool/libwool/bindings/go"
)

func usage() {
	fmt.Fprintln(os.Stderr, "usage: wool-bench-go [seq] ADDR N WARMUP | burst ADDR LEVELS SECONDS | sweep ADDRFILE MAX SWEEPS [TIMEOUT]")
	os.Exit(2)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "wool-bench-go:", err)
	os.Exit(1)
}

// emit prints v as the one line of JSON the runner reads.
func emit(v any) {
	if err := harness.Emit(os.Stdout, v); err != nil {
		fail(err)
	}
}

func main() {
	args := os.Args[1:]
	if len(args) >= 4 && args[0] == "sweep" {
		maxInFlight, err1 := strconv.Atoi(args[2])
		sweeps, err2 := strconv.Atoi(args[3])
		timeout := 30.0
		var err3 error
		if len(args) >= 5 {
			timeout, err3 = strconv.ParseFloat(args[4], 64)
		}
		if err1 != nil || err2 != nil || err3 != nil || maxInFlight < 1 || sweeps < 0 || !(timeout > 0) {
			usage()
		}
		sweep(args[1], maxInFlight, sweeps, timeout)
		return
	}
	mode := "seq"
	if len(args) == 4 {
		mode, args = args[0], args[1:]
	}
	if len(args) != 3 {
		usage()
	}
	switch mode {
	case "seq":
		n, warmup, err := harness.ParseCounts(args[1], args[2])
		if err != nil {
			fmt.Fprintln(os.Stderr, "wool-bench-go:", err)
			os.Exit(2)
		}
		seq(args[0], n, warmup)
	case "burst":
		levels, err1 := harness.ParseLevels(args[1])
		seconds, err2 := harness.ParseSeconds(args[2])
		if err1 != nil || err2 != nil {
			usage()
		}
		burst(args[0], levels, seconds)
	default:
		usage()
	}
}

type sweepsOut struct {
	Endpoints   int     `json:"endpoints"`
	Concurrency int     `json:"concurrency"`
	SweepNs     []int64 `json:"sweep_ns"`
	Failures    []int   `json:"failures"`
	FirstError  string  `json:"first_error"`
}

func seq(addr string, n, warmup int) {
	conn, err := wool.Connect(addr)
	if err != nil {
		fail(err)
	}
	defer conn.Close()
	ctx := context.Background()
	out, err := harness.Seq(n, warmup, func() error {
		_, err := conn.Idle(ctx)
		return err
	})
	if err != nil {
		fail(err)
	}
	emit(out)
}

// sweep: IdleMany over one Connection per address of `file`, `maxInFlight` at once, each sweep
// within one deadline of `timeout` seconds: one cold sweep, then `sweeps` warm ones.
func sweep(file string, maxInFlight, sweeps int, timeout float64) {
	text, err := os.ReadFile(file)
	if err != nil {
		fail(err)
	}
	var conns []*wool.Connection
	for _, line := range strings.Split(string(text), "\n") {
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		conn, err := wool.Connect(line)
		if err != nil {
			fail(err)
		}
		conns = append(conns, conn)
	}
	times := make([]int64, 0, sweeps+1)
	failures := make([]int, 0, sweeps+1)
	firstError := ""
	for i := 0; i <= sweeps; i++ {
		ctx, cancel := context.WithTimeout(context.Background(),
			time.Duration(timeout*float64(time.Second)))
		start := time.Now()
		results := wool.IdleMany(ctx, conns, maxInFlight)
		times = append(times, time.Since(start).Nanoseconds())
		cancel()
		failed := 0
		for _, r := range results {
			if r.Err != nil {
				failed++
				if firstError == "" {
					firstError = r.Err.Error()
				}
			}
		}
		failures = append(failures, failed)
	}
	for _, conn := range conns {
		conn.Close()
	}
	emit(sweepsOut{Endpoints: len(conns), Concurrency: maxInFlight, SweepNs: times,
		Failures: failures, FirstError: firstError})
}

// burst: for each level, bursts of `level` goroutines each making one poll on the one
// Connection, repeated until `seconds` have passed (at least one burst per level).
func burst(addr string, levels []int, seconds float64) {
	conn, err := wool.Connect(addr)
	if err != nil {
		fail(err)
	}
	defer conn.Close()
	{ // connect outside the measurement
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := conn.Idle(ctx)
		cancel()
		if err != nil {
			fail(err)
		}
	}
	var maxThreads atomic.Int64
	stopSampling := harness.SampleThreads(&maxThreads)
	rows := harness.Burst(levels, seconds, func(ctx context.Context) error {
		_, err := conn.Idle(ctx)
		return err
	})
	stopSampling()
	emit(harness.Bursts{Levels: rows, OSThreadsMax: maxThreads.Load()})
}
