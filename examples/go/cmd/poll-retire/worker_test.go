package main

// The example's fixtures: the repository's reference worker (wool-worker) as a child process,
// and an address nobody listens on. (The binding's own fixtures live in its internal package,
// which another module cannot import.)

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// worker is a running wool-worker; the test's cleanup kills it if it is still running.
type worker struct {
	Address string // the dialable address it printed as its first stdout line
	cmd     *exec.Cmd
	exited  chan struct{} // closed once the process has been waited for
}

// workerBin returns the wool-worker binary: $WOOL_WORKER, else target/debug/wool-worker in
// the repository (found from this source file). scripts/go-test.sh builds it.
func workerBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("WOOL_WORKER")
	if bin == "" {
		_, file, _, _ := runtime.Caller(0)
		bin = filepath.Join(filepath.Dir(file), "..", "..", "..", "..", "target", "debug", "wool-worker")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("wool-worker not found (build it with `cargo build --bin wool-worker`, or set WOOL_WORKER): %v", err)
	}
	return bin
}

// startWorker starts wool-worker on a free port and waits for its address.
func startWorker(t *testing.T) *worker {
	t.Helper()
	w := &worker{cmd: exec.Command(workerBin(t)), exited: make(chan struct{})}
	w.cmd.Stderr = os.Stderr
	stdout, err := w.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = w.cmd.Process.Kill()
		<-w.exited
	})
	address := make(chan string, 1)
	go func() {
		scanner := bufio.NewScanner(stdout)
		first := true
		for scanner.Scan() { // read to the end, as exec.Cmd requires before Wait
			if first {
				address <- strings.TrimSpace(scanner.Text())
				first = false
			}
		}
		close(address)
		_ = w.cmd.Wait()
		close(w.exited)
	}()
	select {
	case w.Address = <-address:
	case <-time.After(30 * time.Second):
	}
	if w.Address == "" || strings.HasPrefix(w.Address, "error") {
		t.Fatalf("wool-worker printed no address (got %q)", w.Address)
	}
	return w
}

// waitExit waits up to timeout for the worker to end by itself; it returns the exit code and
// whether it ended.
func (w *worker) waitExit(timeout time.Duration) (code int, exited bool) {
	select {
	case <-w.exited:
		return w.cmd.ProcessState.ExitCode(), true
	case <-time.After(timeout):
		return 0, false
	}
}

// unusedAddress returns a 127.0.0.1 address that was free a moment ago and has no listener.
func unusedAddress(t *testing.T) string {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	address := listener.Addr().String()
	listener.Close()
	return address
}
