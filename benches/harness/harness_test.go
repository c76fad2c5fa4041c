package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
)

func TestParseLevelsTakesCommaSeparatedCountsOfAtLeastOne(t *testing.T) {
	levels, err := ParseLevels("1, 16,256")
	if err != nil || len(levels) != 3 || levels[0] != 1 || levels[1] != 16 || levels[2] != 256 {
		t.Fatalf("got %v, %v", levels, err)
	}
	for _, bad := range []string{"", "0", "1,,2", "-3", "x"} {
		if _, err := ParseLevels(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestParseCountsAndSeconds(t *testing.T) {
	if n, w, err := ParseCounts("10", "0"); err != nil || n != 10 || w != 0 {
		t.Fatalf("got %d %d %v", n, w, err)
	}
	for _, bad := range [][2]string{{"0", "1"}, {"1", "-1"}, {"x", "1"}} {
		if _, _, err := ParseCounts(bad[0], bad[1]); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
	if s, err := ParseSeconds("0.5"); err != nil || s != 0.5 {
		t.Fatalf("got %v %v", s, err)
	}
	for _, bad := range []string{"-1", "NaN", "soon"} {
		if _, err := ParseSeconds(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestSeqWarmsUpThenSamplesEachPoll(t *testing.T) {
	calls := 0
	out, err := Seq(5, 3, func() error { calls++; return nil })
	if err != nil || calls != 8 || len(out.SamplesNs) != 5 {
		t.Fatalf("calls %d, samples %d, %v", calls, len(out.SamplesNs), err)
	}
	for _, s := range out.SamplesNs {
		if s < 0 {
			t.Fatalf("negative sample %d", s)
		}
	}
	failing := errors.New("refused")
	if _, err := Seq(5, 0, func() error { return failing }); !errors.Is(err, failing) {
		t.Fatalf("the poll's error: got %v", err)
	}
}

func TestBurstCountsEveryPollAndKeepsTheFirstError(t *testing.T) {
	var n atomic.Int64
	deadlines := atomic.Bool{}
	deadlines.Store(true)
	rows := Burst([]int{1, 7}, 0, func(ctx context.Context) error {
		if _, ok := ctx.Deadline(); !ok {
			deadlines.Store(false)
		}
		if n.Add(1)%3 == 0 {
			return errors.New("every third fails")
		}
		return nil
	})
	if len(rows) != 2 {
		t.Fatalf("levels: %d", len(rows))
	}
	total := int64(0)
	for i, want := range []int{1, 7} {
		row := rows[i]
		if row.Concurrency != want || row.Bursts != 1 || row.OK+row.Failed != int64(want) {
			t.Errorf("level %d: %+v", want, row)
		}
		total += row.OK + row.Failed
	}
	if total != n.Load() || rows[1].Failed == 0 || rows[1].FirstError != "every third fails" {
		t.Errorf("polls %d, rows %+v", n.Load(), rows)
	}
	if !deadlines.Load() {
		t.Error("a poll had no deadline")
	}
}

func TestEmitWritesOneLineWithTheRunnersKeys(t *testing.T) {
	var out bytes.Buffer
	if err := Emit(&out, Bursts{Levels: []Level{{Concurrency: 2, Bursts: 1, OK: 2}}}); err != nil {
		t.Fatal(err)
	}
	if bytes.Count(out.Bytes(), []byte("\n")) != 1 {
		t.Fatalf("not one line: %q", out.String())
	}
	var back map[string]any
	if err := json.Unmarshal(out.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if _, sampled := back["os_threads_max"]; sampled {
		t.Errorf("os_threads_max present though not sampled: %s", out.String())
	}
	level := back["levels"].([]any)[0].(map[string]any)
	for _, key := range []string{"concurrency", "bursts", "ok", "failed", "elapsed_s", "first_error"} {
		if _, ok := level[key]; !ok {
			t.Errorf("no %q in %s", key, out.String())
		}
	}
}

func TestThreadsAndCPUOfThisProcess(t *testing.T) {
	if runtime.GOOS == "linux" && OSThreads() < 1 {
		t.Fatalf("OSThreads: %d", OSThreads())
	}
	var most atomic.Int64
	stop := SampleThreads(&most)
	stop()
	if runtime.GOOS == "linux" && most.Load() < 1 {
		t.Fatalf("sampled %d", most.Load())
	}
	before := ProcessCPU()
	sum := 0
	for i := 0; i < 10_000_000; i++ {
		sum += i
	}
	if after := ProcessCPU(); after < before || sum == 0 {
		t.Fatalf("CPU time went from %v to %v", before, after)
	}
}
