// A module outside the binding, as a stranger writes one: it imports the binding by its module
// path and links the libwool that pkg-config finds (build tag woolpkgconfig). scripts/go-test.sh
// copies this file into a temporary directory next to a go.mod that requires
// github.com/libwool/libwool/bindings/go (replaced by the repository's copy) and runs it against
// an installed libwool, dynamically (-tags woolpkgconfig) and statically (-tags woolstatic).
//
// WOOL_WORKER names the reference worker (target/debug/wool-worker) the test starts and polls.
package consumer_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	wool "github.com/libwool/libwool/bindings/go"
)

// Given a running reference worker, when a consumer polls it through the binding and then
// stops it, then the poll reports an idle time, the stop succeeds and the worker exits with 0.
func TestPollAndRetireTheReferenceWorker(t *testing.T) {
	t.Logf("libwool %s", wool.Version())
	address, waitExit := startWorker(t)

	conn, err := wool.Connect(address)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	idle, err := conn.Idle(ctx)
	if err != nil {
		t.Fatalf("Idle(%s): %v", address, err)
	}
	if idle <= 0 {
		t.Errorf("Idle = %v, want > 0 for a worker with nothing in flight", idle)
	}
	if err := conn.Stop(ctx, 0); err != nil {
		t.Fatalf("Stop(%s): %v", address, err)
	}
	if err := waitExit(10 * time.Second); err != nil {
		t.Errorf("the worker did not exit cleanly after Stop: %v", err)
	}
}

// Given a target without a port, when a consumer connects, then the error matches
// wool.ErrInvalidArgument.
func TestInvalidTargetIsInvalidArgument(t *testing.T) {
	_, err := wool.Connect("no-port")
	if !errors.Is(err, wool.ErrInvalidArgument) {
		t.Fatalf("Connect(no-port): want ErrInvalidArgument, got %v", err)
	}
}

// startWorker starts $WOOL_WORKER and returns the address it printed first, and a function
// that waits up to a timeout for it to exit by itself (nil when it exited with status 0). The
// test's cleanup kills it if it is still running.
func startWorker(t *testing.T) (address string, waitExit func(time.Duration) error) {
	t.Helper()
	bin := os.Getenv("WOOL_WORKER")
	if bin == "" {
		t.Fatal("set WOOL_WORKER to the wool-worker binary")
	}
	cmd := exec.Command(bin)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	first := make(chan string, 1)
	exited := make(chan error, 1)
	go func() {
		lines := bufio.NewScanner(stdout)
		for n := 0; lines.Scan(); n++ { // read to the end before Wait, as exec.Cmd requires
			if n == 0 {
				first <- strings.TrimSpace(lines.Text())
			}
		}
		close(first)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	select {
	case address = <-first:
	case <-time.After(30 * time.Second):
	}
	if address == "" {
		t.Fatalf("%s printed no address", bin)
	}
	return address, func(timeout time.Duration) error {
		select {
		case err := <-exited:
			exited <- err // for the cleanup
			return err
		case <-time.After(timeout):
			return errors.New("still running")
		}
	}
}
