// Package workertest provides the fixtures of the binding's tests: real worker processes
// (the repository's wool-worker, and real Wool Python workers from the pinned virtual
// environments), a throwaway PKI, a server that accepts TCP and never answers, and a minimal
// gRPC dispatch that keeps a task in flight.
//
// Environment:
//   - WOOL_WORKER: the wool-worker binary (default: target/debug/wool-worker in the repository).
//   - WOOL_TEST_REQUIRE_PEERS=1: fail, instead of skipping, when a Wool virtual environment
//     (made by scripts/setup-venvs.sh) is missing. scripts/go-test.sh sets it.
package workertest

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startTimeout bounds how long a worker may take to print its address (a Wool Python worker
// spawns a process and imports its runtime first).
const startTimeout = 60 * time.Second

// RepoRoot returns the libwool repository's root directory, found from this source file so
// that it does not depend on the test's working directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", "..", ".."))
}

// WorkerBin returns the wool-worker binary, failing the test when it has not been built.
func WorkerBin(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("WOOL_WORKER")
	if bin == "" {
		bin = filepath.Join(RepoRoot(), "target", "debug", "wool-worker")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("wool-worker not found at %s (build it: `cargo build --bin wool-worker` in %s, or set WOOL_WORKER): %v",
			bin, RepoRoot(), err)
	}
	return bin
}

// Process is a running worker process; the test's cleanup stops it.
type Process struct {
	// Address is the dialable address the worker printed as its first stdout line.
	Address string

	cmd    *exec.Cmd
	lines  chan string   // stdout lines after the address; closed at end of output
	exited chan struct{} // closed once the process has been waited for
	stderr *lockedBuffer
}

// StartWorker starts wool-worker with args and waits for its address.
func StartWorker(t testing.TB, args ...string) *Process {
	t.Helper()
	cmd := exec.Command(WorkerBin(t), args...)
	return start(t, cmd, nil)
}

// StartWoolWorker starts a real Wool LocalWorker of the given version (tests/interop/
// wool_worker.py in the venv target/venvs/wool-VERSION) with args, and waits for its address.
// Skips the test when the venv is missing, unless WOOL_TEST_REQUIRE_PEERS=1. The worker stops
// when the test ends (its stdin is closed).
func StartWoolWorker(t testing.TB, version string, args ...string) *Process {
	t.Helper()
	root := RepoRoot()
	python := filepath.Join(root, "target", "venvs", "wool-"+version, "bin", "python")
	if _, err := os.Stat(python); err != nil {
		message := "Wool " + version + " venv missing at " + python + " (make it: scripts/setup-venvs.sh)"
		if os.Getenv("WOOL_TEST_REQUIRE_PEERS") == "1" {
			t.Fatal(message)
		}
		t.Skip(message)
	}
	script := filepath.Join(root, "tests", "interop", "wool_worker.py")
	cmd := exec.Command(python, append([]string{script}, args...)...)
	stdin, err := cmd.StdinPipe() // closing it stops the worker (see the script's docstring)
	if err != nil {
		t.Fatal(err)
	}
	return start(t, cmd, stdin)
}

// launch starts cmd with its stderr kept and its stdout lines fed to the Process.
func launch(t testing.TB, cmd *exec.Cmd) *Process {
	t.Helper()
	p := &Process{cmd: cmd, lines: make(chan string, 64), exited: make(chan struct{}), stderr: &lockedBuffer{}}
	cmd.Stderr = p.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	go p.readLines(stdout)
	return p
}

func start(t testing.TB, cmd *exec.Cmd, stdin io.Closer) *Process {
	t.Helper()
	p := launch(t, cmd)
	t.Cleanup(func() { p.stop(t, stdin) })
	first, ok := p.nextLine(startTimeout)
	if !ok || first == "" || strings.HasPrefix(first, "error") {
		t.Fatalf("%s printed no address (first line %q); stderr:\n%s", cmd.Path, first, p.stderr)
	}
	p.Address = first
	return p
}

// readLines feeds stdout lines to p.lines, then waits for the process (after the output ends,
// as exec.Cmd requires).
func (p *Process) readLines(stdout io.Reader) {
	scanner := bufio.NewScanner(stdout)
	for scanner.Scan() {
		p.lines <- scanner.Text()
	}
	close(p.lines)
	_ = p.cmd.Wait()
	close(p.exited)
}

func (p *Process) nextLine(timeout time.Duration) (string, bool) {
	select {
	case line, ok := <-p.lines:
		return strings.TrimSpace(line), ok
	case <-time.After(timeout):
		return "", false
	}
}

// WaitLine waits up to timeout for a stdout line equal to want, failing the test otherwise.
func (p *Process) WaitLine(t testing.TB, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		line, ok := p.nextLine(time.Until(deadline))
		if !ok {
			t.Fatalf("no line %q within %v; stderr:\n%s", want, timeout, p.stderr)
		}
		if line == want {
			return
		}
	}
}

// WaitExit waits up to timeout for the process to end by itself; it returns the exit code
// and whether it ended.
func (p *Process) WaitExit(timeout time.Duration) (code int, exited bool) {
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode(), true
	case <-time.After(timeout):
		return 0, false
	}
}

// Freeze suspends the process with SIGSTOP: its sockets stay open but it answers nothing, not
// even HTTP/2 PINGs. The test's cleanup resumes it (before stopping it), even when the test
// fails.
func (p *Process) Freeze(t testing.TB) {
	t.Helper()
	t.Cleanup(func() { _ = p.cmd.Process.Signal(syscall.SIGCONT) })
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %s: %v", filepath.Base(p.cmd.Path), err)
	}
}

// Thaw resumes a process suspended by Freeze (SIGCONT).
func (p *Process) Thaw(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT %s: %v", filepath.Base(p.cmd.Path), err)
	}
}

// Stderr returns what the process wrote to stderr so far.
func (p *Process) Stderr() string { return p.stderr.String() }

// stop ends the process: gracefully through stdin when there is one, else (or when that is
// too slow) by killing it. It logs the process's stderr when the test failed.
func (p *Process) stop(t testing.TB, stdin io.Closer) {
	if stdin != nil {
		_ = stdin.Close()
		if _, ok := p.WaitExit(10 * time.Second); ok {
			p.logIfFailed(t)
			return
		}
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
	p.logIfFailed(t)
}

func (p *Process) logIfFailed(t testing.TB) {
	if t.Failed() && p.stderr.Len() > 0 {
		t.Logf("stderr of %s:\n%s", filepath.Base(p.cmd.Path), p.stderr)
	}
}

// lockedBuffer is a bytes.Buffer safe for the writer goroutine of exec and a reading test.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(data []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(data)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *lockedBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}
