// Package harness is what the Go benchmark drivers share (benches/go: polls through the Go
// binding; benches/grpc-go: the plain grpc-go anchor): their command-line parsing, the
// sequential and burst loops, the process's CPU time and OS threads, and the one line of JSON
// they print for benches/run.py. Nothing here asserts on time: the drivers measure, run.py
// turns the measurements into statistics.
//
// The JSON has the keys of the Rust driver (benches/wool_bench.rs): durations of single
// operations in integer nanoseconds, totals in seconds. A sequential run is a [Latency]
// ({"samples_ns":[one per poll],"elapsed_s","cpu_s"}); bursts are a [Bursts] ({"levels":
// [{"concurrency","bursts","ok","failed","elapsed_s","first_error"}]}, and "os_threads_max"
// when the driver samples it).
package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// BurstCallTimeout is the deadline of each poll of a burst: 60 s, as the Rust burst driver's.
const BurstCallTimeout = 60 * time.Second

// Latency is a sequential run: one sample per poll, the run's wall-clock and CPU time.
type Latency struct {
	SamplesNs []int64 `json:"samples_ns"`
	ElapsedS  float64 `json:"elapsed_s"`
	CPUS      float64 `json:"cpu_s"`
}

// Level is one concurrency level of a burst run.
type Level struct {
	Concurrency int     `json:"concurrency"`
	Bursts      int     `json:"bursts"`
	OK          int64   `json:"ok"`
	Failed      int64   `json:"failed"`
	ElapsedS    float64 `json:"elapsed_s"`
	FirstError  string  `json:"first_error"`
}

// Bursts is a burst run: its levels, and the most OS threads the process had during them
// (omitted when not sampled; not "max_threads", which run.py reads from a burst driver as the
// C driver's thread cap).
type Bursts struct {
	Levels       []Level `json:"levels"`
	OSThreadsMax int64   `json:"os_threads_max,omitempty"`
}

// Emit writes v to w as the one line of JSON the benchmark runner reads.
func Emit(w io.Writer, v any) error {
	out, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(out))
	return err
}

// ParseCounts reads N and WARMUP: N at least 1, WARMUP at least 0.
func ParseCounts(n, warmup string) (int, int, error) {
	count, err1 := strconv.Atoi(n)
	warm, err2 := strconv.Atoi(warmup)
	if err1 != nil || err2 != nil || count < 1 || warm < 0 {
		return 0, 0, fmt.Errorf("N and WARMUP are counts (N at least 1): %q %q", n, warmup)
	}
	return count, warm, nil
}

// ParseLevels reads LEVELS, concurrency levels separated by commas ("1,16,256,10000"), each
// at least 1.
func ParseLevels(text string) ([]int, error) {
	var levels []int
	for _, s := range strings.Split(text, ",") {
		l, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || l < 1 {
			return nil, fmt.Errorf("LEVELS: %q is not a concurrency level (at least 1)", s)
		}
		levels = append(levels, l)
	}
	return levels, nil
}

// ParseSeconds reads a duration in seconds, at least 0.
func ParseSeconds(text string) (float64, error) {
	seconds, err := strconv.ParseFloat(text, 64)
	if err != nil || !(seconds >= 0) {
		return 0, fmt.Errorf("%q is not a number of seconds", text)
	}
	return seconds, nil
}

// Seq makes warmup polls, then n timed ones, one at a time; the first error ends it.
func Seq(n, warmup int, poll func() error) (Latency, error) {
	for i := 0; i < warmup; i++ {
		if err := poll(); err != nil {
			return Latency{}, err
		}
	}
	samples := make([]int64, n)
	cpu := ProcessCPU()
	start := time.Now()
	for i := range samples {
		t := time.Now()
		if err := poll(); err != nil {
			return Latency{}, err
		}
		samples[i] = time.Since(t).Nanoseconds()
	}
	elapsed := time.Since(start).Seconds()
	return Latency{SamplesNs: samples, ElapsedS: elapsed, CPUS: ProcessCPU() - cpu}, nil
}

// Burst runs, for each level, bursts of `level` goroutines each making one poll (each within
// [BurstCallTimeout]), repeated until `seconds` have passed (at least one burst per level);
// failed polls are counted, the first one's error kept.
func Burst(levels []int, seconds float64, poll func(context.Context) error) []Level {
	budget := time.Duration(seconds * float64(time.Second))
	rows := []Level{}
	for _, lv := range levels {
		var ok, failed atomic.Int64
		var firstError sync.Once
		message := ""
		bursts := 0
		start := time.Now()
		for bursts == 0 || time.Since(start) < budget {
			var wg sync.WaitGroup
			wg.Add(lv)
			for i := 0; i < lv; i++ {
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), BurstCallTimeout)
					defer cancel()
					if err := poll(ctx); err != nil {
						failed.Add(1)
						firstError.Do(func() { message = err.Error() })
						return
					}
					ok.Add(1)
				}()
			}
			wg.Wait()
			bursts++
		}
		rows = append(rows, Level{Concurrency: lv, Bursts: bursts, OK: ok.Load(),
			Failed: failed.Load(), ElapsedS: time.Since(start).Seconds(), FirstError: message})
	}
	return rows
}

// SampleThreads records the most OS threads of this process in *most, every 10 ms, until the
// returned function is called.
func SampleThreads(most *atomic.Int64) (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	record := func() {
		if n := OSThreads(); n > most.Load() {
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

// OSThreads is this process's OS thread count (Threads: in /proc/self/status); 0 if unknown.
func OSThreads() int64 {
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

// ProcessCPU is this process's user + system CPU time (all threads), in seconds.
func ProcessCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
