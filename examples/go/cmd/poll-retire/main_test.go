package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// Given two idle wool-workers, when poll-retire runs with a 300 ms threshold, then it prints
// readings, retires both, exits 0, and both worker processes exit with status 0.
func TestRetiresEveryIdleWorker(t *testing.T) {
	t.Parallel()
	a, b := startWorker(t), startWorker(t)
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	status := run(ctx, []string{"-threshold", "300ms", "-interval", "100ms", a.Address, b.Address}, &stdout, &stderr)

	t.Logf("output:\n%s", stdout.String())
	if status != 0 {
		t.Fatalf("exit status %d; stderr: %s", status, stderr.String())
	}
	for _, w := range []*worker{a, b} {
		if !hasLine(stdout.String(), w.Address, "retired") {
			t.Errorf("no line %q in the output", w.Address+" retired")
		}
		if code, exited := w.waitExit(10 * time.Second); !exited || code != 0 {
			t.Errorf("worker %s: exited %v, status %d", w.Address, exited, code)
		}
	}
	if !strings.Contains(stdout.String(), "done: 2 retired, 0 given up on") {
		t.Errorf("no summary line")
	}
}

// Given an unreachable address among the workers, when poll-retire runs, then it keeps
// skipping it until interrupted, and exits 1.
func TestKeepsSkippingAnUnreachableWorkerUntilInterrupted(t *testing.T) {
	t.Parallel()
	address := unusedAddress(t)
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()

	status := run(ctx, []string{"-interval", "100ms", address}, &stdout, &stderr)

	t.Logf("output:\n%s", stdout.String())
	if status != 1 || !strings.Contains(stdout.String(), "unreachable for now") ||
		!strings.Contains(stdout.String(), "interrupted with 1 workers left") {
		t.Fatalf("exit status %d; stderr: %s", status, stderr.String())
	}
}

// Given no addresses or a bad target, when poll-retire runs, then it exits 2.
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{}, {"-interval", "0s", "127.0.0.1:1"}, {"no-port"}, {"-tls-cert", "c.pem", "127.0.0.1:1"}} {
		var stdout, stderr bytes.Buffer
		if status := run(context.Background(), args, &stdout, &stderr); status != 2 {
			t.Errorf("%q: exit status %d, want 2", args, status)
		}
	}
}

// hasLine reports whether output has a line made of exactly these fields.
func hasLine(output string, fields ...string) bool {
	for _, line := range strings.Split(output, "\n") {
		if strings.Join(strings.Fields(line), " ") == strings.Join(fields, " ") {
			return true
		}
	}
	return false
}
