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
// Output: one line of JSON on stdout (encoding/json): raw measurements, with the keys of the
// Rust driver (benches/wool_bench.rs), which benches/run.py turns into statistics; durations of
// single operations in integer nanoseconds, totals in seconds. seq as `seq-conn`
// ({"samples_ns":[one per poll],"elapsed_s","cpu_s"}); burst as `burst` ({"levels":
// [{"concurrency","bursts","ok","failed","elapsed_s","first_error"}]}, plus "os_threads_max":
// the most OS threads this process had during the bursts, sampled from /proc/self/status; not
// "max_threads", which benches/run.py reads from a burst driver as the C driver's thread cap);
// sweep as `sweep` ({"endpoints","concurrency","sweep_ns":[cold, warm...],"failures":[per
// sweep],"first_error"}).
//
// The binding finds libwool through pkg-config; scripts/bench.sh writes a wool.pc for the
// release build (target/release) and builds this with it:
//
//	PKG_CONFIG_PATH=DIR-OF-THAT-wool.pc go build -o BIN .
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

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
		n, err1 := strconv.Atoi(args[1])
		warmup, err2 := strconv.Atoi(args[2])
		if err1 != nil || err2 != nil || n < 1 || warmup < 0 {
			fmt.Fprintln(os.Stderr, "wool-bench-go: N and WARMUP are counts")
			os.Exit(2)
		}
		seq(args[0], n, warmup)
	case "burst":
		var levels []int
		for _, s := range strings.Split(args[1], ",") {
			l, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || l < 1 {
				usage()
			}
			levels = append(levels, l)
		}
		seconds, err := strconv.ParseFloat(args[2], 64)
		if err != nil || !(seconds >= 0) {
			usage()
		}
		burst(args[0], levels, seconds)
	default:
		usage()
	}
}

// The outputs (see the package comment).

type latency struct {
	SamplesNs []int64 `json:"samples_ns"`
	ElapsedS  float64 `json:"elapsed_s"`
	CPUS      float64 `json:"cpu_s"`
}

type level struct {
	Concurrency int     `json:"concurrency"`
	Bursts      int     `json:"bursts"`
	OK          int64   `json:"ok"`
	Failed      int64   `json:"failed"`
	ElapsedS    float64 `json:"elapsed_s"`
	FirstError  string  `json:"first_error"`
}

type burstsOut struct {
	Levels       []level `json:"levels"`
	OSThreadsMax int64   `json:"os_threads_max"`
}

type sweepsOut struct {
	Endpoints   int     `json:"endpoints"`
	Concurrency int     `json:"concurrency"`
	SweepNs     []int64 `json:"sweep_ns"`
	Failures    []int   `json:"failures"`
	FirstError  string  `json:"first_error"`
}

// emit prints v as the one line of JSON the harness reads.
func emit(v any) {
	out, err := json.Marshal(v)
	if err != nil {
		fail(err)
	}
	fmt.Println(string(out))
}

func seq(addr string, n, warmup int) {
	conn, err := wool.Connect(addr)
	if err != nil {
		fail(err)
	}
	defer conn.Close()
	ctx := context.Background()
	for i := 0; i < warmup; i++ {
		if _, err := conn.Idle(ctx); err != nil {
			fail(err)
		}
	}
	samples := make([]int64, n)
	cpu := processCPU()
	start := time.Now()
	for i := range samples {
		t := time.Now()
		if _, err := conn.Idle(ctx); err != nil {
			fail(err)
		}
		samples[i] = time.Since(t).Nanoseconds()
	}
	elapsed := time.Since(start).Seconds()
	emit(latency{SamplesNs: samples, ElapsedS: elapsed, CPUS: processCPU() - cpu})
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
	stopSampling := sampleThreads(&maxThreads)
	budget := time.Duration(seconds * float64(time.Second))
	rows := []level{}
	for _, lv := range levels {
		var ok, failed atomic.Int64
		var mu sync.Mutex
		firstError := ""
		bursts := 0
		start := time.Now()
		for bursts == 0 || time.Since(start) < budget {
			var wg sync.WaitGroup
			wg.Add(lv)
			for i := 0; i < lv; i++ {
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
					defer cancel()
					if _, err := conn.Idle(ctx); err != nil {
						failed.Add(1)
						mu.Lock()
						if firstError == "" {
							firstError = err.Error()
						}
						mu.Unlock()
						return
					}
					ok.Add(1)
				}()
			}
			wg.Wait()
			bursts++
		}
		rows = append(rows, level{Concurrency: lv, Bursts: bursts, OK: ok.Load(),
			Failed: failed.Load(), ElapsedS: time.Since(start).Seconds(), FirstError: firstError})
	}
	stopSampling()
	emit(burstsOut{Levels: rows, OSThreadsMax: maxThreads.Load()})
}

// sampleThreads records the most OS threads of this process in *most, every 10 ms, until the
// returned function is called.
func sampleThreads(most *atomic.Int64) (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	record := func() {
		if n := osThreads(); n > most.Load() {
			most.Store(n)
		}
	}
	record()
	go func() {
		defer close(stopped)
		ticker := time.NewTicker(10 * time.Millisecond)
		defer ticker.Stop()
		for {
			select {
			case <-done:
				return
			case <-ticker.C:
				record()
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
		record()
	}
}

// osThreads is this process's OS thread count (Threads: in /proc/self/status); 0 if unknown.
func osThreads() int64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(status), "\n") {
		if value, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
			return n
		}
	}
	return 0
}

// processCPU is this process's user + system CPU time (all threads), in seconds.
func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
