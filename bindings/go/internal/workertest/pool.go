package workertest

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// poolVersion is the Wool version whose venv runs tests/interop/wool_pool.py.
const poolVersion = "0.15.7"

// UniqueNamespace returns a discovery namespace no other test uses ("libwool-go-" and a
// random suffix), so tests in parallel each see only their own pool.
func UniqueNamespace(t testing.TB) string {
	t.Helper()
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("libwool-go-%x", b)
}

// woolPython returns the venv interpreter of Wool version, skipping (or, with
// WOOL_TEST_REQUIRE_PEERS=1, failing) the test when the venv is missing.
func woolPython(t testing.TB, version string) string {
	t.Helper()
	python := filepath.Join(RepoRoot(), "target", "venvs", "wool-"+version, "bin", "python")
	if _, err := os.Stat(python); err != nil {
		message := "Wool " + version + " venv missing at " + python + " (make it: scripts/setup-venvs.sh)"
		if os.Getenv("WOOL_TEST_REQUIRE_PEERS") == "1" {
			t.Fatal(message)
		}
		t.Skip(message)
	}
	return python
}

// Pool is a real Wool WorkerPool (tests/interop/wool_pool.py pool) publishing its workers under
// a namespace with LocalDiscovery; the test's cleanup ends it with SIGTERM.
type Pool struct {
	Namespace string
	process   *Process
}

// StartWoolPool starts a Wool 0.15.7 WorkerPool of spawn workers under namespace and waits
// until it prints "ready" (its workers are published in the shared-memory registry).
func StartWoolPool(t testing.TB, namespace string, spawn int) *Pool {
	t.Helper()
	script := filepath.Join(RepoRoot(), "tests", "interop", "wool_pool.py")
	cmd := exec.Command(woolPython(t, poolVersion), script, "pool", namespace, "--spawn", fmt.Sprint(spawn))
	p := launch(t, cmd)
	pool := &Pool{Namespace: namespace, process: p}
	t.Cleanup(func() { pool.Terminate(t) })
	line, ok := p.nextLine(startTimeout)
	if !ok || line != "ready" {
		t.Fatalf("wool_pool.py pool %s printed %q instead of ready; stderr:\n%s", namespace, line, p.stderr)
	}
	return pool
}

// Terminate ends the pool with SIGTERM (it stops and unpublishes its workers) and waits for
// it to exit, killing it after 30 s. Idempotent.
func (p *Pool) Terminate(t testing.TB) {
	select {
	case <-p.process.exited:
		return
	default:
	}
	_ = p.process.cmd.Process.Signal(syscall.SIGTERM)
	if _, ok := p.process.WaitExit(30 * time.Second); !ok {
		_ = p.process.cmd.Process.Kill()
		<-p.process.exited
	}
	p.process.logIfFailed(t)
}

// SubscribedWorker is one worker as Wool's own subscriber lists it (wool_pool.py subscribe).
type SubscribedWorker struct {
	UID      string            `json:"uid"`
	Address  string            `json:"address"`
	PID      int32             `json:"pid"`
	Version  string            `json:"version"`
	Tags     []string          `json:"tags"`
	Extra    map[string]string `json:"extra"`
	Secure   bool              `json:"secure"`
	Identity *string           `json:"identity"`
}

// WoolSubscribe runs Wool's own subscriber on namespace for seconds (wool_pool.py subscribe)
// and returns the workers it then holds, sorted by address.
func WoolSubscribe(t testing.TB, namespace string, seconds float64) []SubscribedWorker {
	t.Helper()
	script := filepath.Join(RepoRoot(), "tests", "interop", "wool_pool.py")
	cmd := exec.Command(woolPython(t, poolVersion), script, "subscribe", namespace, "--seconds", fmt.Sprint(seconds))
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("wool_pool.py subscribe %s: %v; stderr:\n%s", namespace, err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) == 0 || lines[len(lines)-1] != "done" {
		t.Fatalf("wool_pool.py subscribe %s did not end with done: %q", namespace, out)
	}
	workers := []SubscribedWorker{}
	for _, line := range lines[:len(lines)-1] {
		var w SubscribedWorker
		if err := json.Unmarshal([]byte(line), &w); err != nil {
			t.Fatalf("wool_pool.py subscribe %s: line %q: %v", namespace, line, err)
		}
		workers = append(workers, w)
	}
	return workers
}
