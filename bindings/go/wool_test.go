package wool_test

// Every test starts the real processes it talks to (wool-worker from target/debug, or a Wool
// Python worker from the pinned venvs) and says what it arranges, does and expects as
// Given / When / Then. Tests run in parallel: each has its own workers.

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	wool "github.com/libwool/libwool/bindings/go"
	"github.com/libwool/libwool/bindings/go/internal/workertest"
)

// callTimeout bounds calls that are expected to succeed; a hang fails instead of blocking.
const callTimeout = 10 * time.Second

// prompt is how late a call may return after its context ended and still count as prompt
// (generous: tests run in parallel under the race detector).
const prompt = time.Second

func connect(t *testing.T, target string, opts ...wool.Option) *wool.Connection {
	t.Helper()
	conn, err := wool.Connect(target, opts...)
	if err != nil {
		t.Fatalf("Connect(%q): %v", target, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func idle(conn *wool.Connection) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	return conn.Idle(ctx)
}

func mustIdle(t *testing.T, conn *wool.Connection) time.Duration {
	t.Helper()
	seconds, err := idle(conn)
	if err != nil {
		t.Fatalf("Idle(%s): %v", conn.Target(), err)
	}
	return seconds
}

// requireKind fails unless err is an *Error of the given kind (and of no other kind).
func requireKind(t *testing.T, err, kind error) *wool.Error {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Fatalf("want an error matching %v, got %v", kind, err)
	}
	for _, other := range []error{wool.ErrInvalidArgument, wool.ErrIdleUnavailable, wool.ErrTransient,
		wool.ErrHandshake, wool.ErrRPC, wool.ErrPanic} {
		if other != kind && errors.Is(err, other) {
			t.Errorf("%v also matches %v", err, other)
		}
	}
	var werr *wool.Error
	if !errors.As(err, &werr) {
		t.Fatalf("want a *wool.Error, got %T: %v", err, err)
	}
	t.Logf("as expected: %v", err)
	return werr
}

func eventually(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestVersionIsTheLibrarys(t *testing.T) {
	t.Parallel()
	if v := wool.Version(); v == "" || strings.ContainsAny(v, " \n") {
		t.Fatalf("Version() = %q", v)
	}
}

func TestStatusNamesComeFromTheLibrary(t *testing.T) {
	t.Parallel()
	for status, want := range map[wool.Status]string{
		wool.StatusOK:              "WOOL_STATUS_OK",
		wool.StatusInvalidArgument: "WOOL_STATUS_INVALID_ARGUMENT",
		wool.StatusIdleUnavailable: "WOOL_STATUS_IDLE_UNAVAILABLE",
		wool.StatusTransient:       "WOOL_STATUS_TRANSIENT",
		wool.StatusHandshake:       "WOOL_STATUS_HANDSHAKE",
		wool.StatusRPCError:        "WOOL_STATUS_RPC_ERROR",
		wool.StatusPanic:           "WOOL_STATUS_PANIC",
		wool.StatusCancelled:       "WOOL_STATUS_CANCELLED",
		wool.Status(8):             "WOOL_STATUS_UNKNOWN",
		wool.Status(-1):            "WOOL_STATUS_UNKNOWN",
	} {
		if got := status.String(); got != want {
			t.Errorf("Status(%d).String() = %q, want %q", int(status), got, want)
		}
	}
}

// Given a fresh wool-worker with nothing in flight, when it is polled twice 300 ms apart,
// then both readings are positive and the second exceeds the first by about 300 ms.
func TestIdleAccruesWhileNothingIsInFlight(t *testing.T) {
	t.Parallel()
	worker := workertest.StartWorker(t)
	conn := connect(t, worker.Address)

	first := mustIdle(t, conn)
	time.Sleep(300 * time.Millisecond)
	second := mustIdle(t, conn)

	if first <= 0 {
		t.Errorf("first reading %v, want > 0", first)
	}
	if grew := second - first; grew < 250*time.Millisecond || grew > 300*time.Millisecond+prompt {
		t.Errorf("idle grew by %v over 300 ms (%v then %v)", grew, first, second)
	}
}

// Given a wool-worker with one task in flight (a dispatch held open), when it is polled, then
// idle is exactly 0, every time; when the task ends, idle counts again from that moment.
func TestIdleIsZeroWhileATaskIsInFlight(t *testing.T) {
	t.Parallel()
	worker := workertest.StartWorker(t)
	conn := connect(t, worker.Address)
	time.Sleep(200 * time.Millisecond) // let some idle time accrue first, so 0 means something
	dispatch := workertest.StartDispatch(t, worker.Address, "echo", []byte("hello"))

	for i := 0; i < 3; i++ {
		if got := mustIdle(t, conn); got != 0 {
			t.Fatalf("reading %d with a task in flight: %v, want exactly 0", i, got)
		}
		time.Sleep(50 * time.Millisecond)
	}
	ended := time.Now()
	dispatch.End()

	var after time.Duration
	eventually(t, "idle counts again after the task ended", 60*time.Second, func() bool {
		after = mustIdle(t, conn)
		return after > 0
	})
	if since := time.Since(ended); after > since {
		t.Errorf("idle %v after the task ended %v ago: it did not restart at the drain", after, since)
	}
}

// Given a real Wool 0.15.7 worker running a 2-second task dispatched by Wool's own client,
// when it is polled after the task's acknowledgement, then idle is exactly 0; after the
// result came back it is positive and below a second.
func TestIdleIsZeroWhileATaskIsInFlightOnWool(t *testing.T) {
	t.Parallel()
	worker := workertest.StartWoolWorker(t, "0.15.7", "--busy", "2")
	conn := connect(t, worker.Address)

	worker.WaitLine(t, "busy-start", 30*time.Second)
	if got := mustIdle(t, conn); got != 0 {
		t.Fatalf("idle with a task in flight: %v, want exactly 0", got)
	}
	worker.WaitLine(t, "busy-done", 30*time.Second)
	var after time.Duration // the worker drops the task once its stream has closed: soon
	eventually(t, "idle counts again after the task finished", 60*time.Second, func() bool {
		after = mustIdle(t, conn)
		return after > 0
	})
	if after >= time.Second {
		t.Fatalf("idle just after the task finished: %v, want below 1s", after)
	}
}

// Given a wool-worker, when it is stopped with no grace, then Stop returns nil, the process
// exits with status 0, and a later poll fails with ErrTransient (gRPC UNAVAILABLE).
func TestStopRetiresTheWorker(t *testing.T) {
	t.Parallel()
	worker := workertest.StartWorker(t)
	conn := connect(t, worker.Address)

	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if err := conn.Stop(ctx, 0); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if code, exited := worker.WaitExit(10 * time.Second); !exited || code != 0 {
		t.Fatalf("worker after Stop: exited %v, status %d; want exit status 0", exited, code)
	}
	_, err := idle(conn)
	if werr := requireKind(t, err, wool.ErrTransient); werr.Code != 14 {
		t.Errorf("Code = %d, want 14 (UNAVAILABLE): %v", werr.Code, err)
	}
}

// Given a wool-worker with a task in flight, when it is stopped with GraceForever, then Stop
// waits for the task however long it runs, and returns nil once the task has ended.
func TestStopWithGraceForeverWaitsForTheTaskInFlight(t *testing.T) {
	t.Parallel()
	worker := workertest.StartWorker(t)
	conn := connect(t, worker.Address)
	dispatch := workertest.StartDispatch(t, worker.Address, "echo", []byte("hello"))

	stopped := make(chan error, 1)
	go func() { stopped <- conn.Stop(context.Background(), wool.GraceForever) }()
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned %v while the task was still in flight", err)
	case <-time.After(500 * time.Millisecond):
	}
	dispatch.End()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("Stop: %v", err)
		}
	case <-time.After(callTimeout):
		t.Fatal("Stop did not return after the task ended")
	}
	if code, exited := worker.WaitExit(10 * time.Second); !exited || code != 0 {
		t.Fatalf("worker after Stop: exited %v, status %d; want exit status 0", exited, code)
	}
}

// Given a wool-worker with a task in flight that would never end, when it is stopped with no
// grace, then the task is cancelled and Stop returns nil promptly.
func TestStopWithoutGraceCancelsTheTaskInFlight(t *testing.T) {
	t.Parallel()
	worker := workertest.StartWorker(t)
	conn := connect(t, worker.Address)
	workertest.StartDispatch(t, worker.Address, "echo", []byte("hello"))

	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	start := time.Now()
	if err := conn.Stop(ctx, 0); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if took := time.Since(start); took > prompt {
		t.Errorf("Stop with no grace took %v", took)
	}
	if code, exited := worker.WaitExit(10 * time.Second); !exited || code != 0 {
		t.Fatalf("worker after Stop: exited %v, status %d; want exit status 0", exited, code)
	}
}

// Given a real Wool 0.13.1 worker (it predates the idle RPC), when it is polled, then the
// error is ErrIdleUnavailable with gRPC code 12 (UNIMPLEMENTED), and no other kind.
func TestLegacyWorkerGivesErrIdleUnavailable(t *testing.T) {
	t.Parallel()
	worker := workertest.StartWoolWorker(t, "0.13.1")
	conn := connect(t, worker.Address)

	_, err := idle(conn)
	werr := requireKind(t, err, wool.ErrIdleUnavailable)
	if werr.Code != 12 || werr.Status != wool.StatusIdleUnavailable {
		t.Errorf("got Status %v, Code %d; want WOOL_STATUS_IDLE_UNAVAILABLE, 12: %v", werr.Status, werr.Code, err)
	}
}

// Given nothing listening on a port, when it is polled, then the error is ErrTransient
// (UNAVAILABLE): skip the worker, keep it.
func TestUnreachableWorkerIsTransient(t *testing.T) {
	t.Parallel()
	server := workertest.StartHoldServer(t)
	address := server.Address()
	server.Release() // the port is now closed
	conn := connect(t, address)

	_, err := idle(conn)
	if werr := requireKind(t, err, wool.ErrTransient); werr.Code != 14 {
		t.Errorf("Code = %d, want 14 (UNAVAILABLE): %v", werr.Code, err)
	}
}

// Given a server that accepts TCP and never writes a byte, when a Connection with a 1 s connect
// timeout polls it (30 s context deadline) and stops it (30 s grace), then each call ends at the
// connect timeout, long before its deadline or grace: ErrTransient, code 14 (UNAVAILABLE), the
// message saying the peer accepted the connection but never spoke HTTP/2.
func TestAPeerThatNeverSpeaksEndsCallsAtTheConnectTimeout(t *testing.T) {
	t.Parallel()
	server := workertest.StartHoldServer(t)
	conn := connect(t, server.Address(), wool.WithConnectTimeout(time.Second))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	_, idleErr := conn.Idle(ctx)
	stopErr := conn.Stop(ctx, 30*time.Second)
	took := time.Since(start)

	for _, err := range []error{idleErr, stopErr} {
		werr := requireKind(t, err, wool.ErrTransient)
		if werr.Code != 14 || !strings.Contains(werr.Message, "accepted the connection but never spoke HTTP/2") {
			t.Errorf("want code 14 and a peer that never spoke HTTP/2, got %v", err)
		}
	}
	// Two calls, each ended by the 1 s connect timeout; generous, the deadline is 30 s.
	if took > 20*time.Second {
		t.Errorf("Idle and Stop took %v with a 1 s connect timeout", took)
	}
}

// Given a wool-worker serving mutual TLS with certificates from a test CA, when clients with
// various credentials poll it, then the right credentials work (also after being closed, from
// PEM or from files, with an identity override), and each wrong one fails with a TLS error.
func TestMutualTLS(t *testing.T) {
	t.Parallel()
	pki := workertest.NewPKI(t)
	worker := workertest.StartWorker(t, pki.MutualArgs()...)

	// pollWith(t)(credentials, err) polls the worker with credentials, closed right after Connect.
	pollWith := func(t *testing.T) func(*wool.Credentials, error) (time.Duration, error) {
		return func(credentials *wool.Credentials, err error) (time.Duration, error) {
			t.Helper()
			if err != nil {
				t.Fatalf("credentials: %v", err)
			}
			conn := connect(t, worker.Address, wool.WithCredentials(credentials))
			credentials.Close() // the connection keeps its own copy
			return idle(conn)
		}
	}
	t.Run("right credentials from PEM", func(t *testing.T) {
		t.Parallel()
		if _, err := pollWith(t)(wool.CredentialsFromPEM(pki.CAPEM, pki.Leaf.KeyPEM, pki.Leaf.CertPEM, true, "")); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("right credentials from files", func(t *testing.T) {
		t.Parallel()
		if _, err := pollWith(t)(wool.CredentialsFromFiles(pki.CAPath, pki.Leaf.KeyPath, pki.Leaf.CertPath, true, "")); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("identity override matching a SAN", func(t *testing.T) {
		t.Parallel()
		if _, err := pollWith(t)(wool.CredentialsFromPEM(pki.CAPEM, pki.Leaf.KeyPEM, pki.Leaf.CertPEM, true, "localhost")); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("identity override matching no SAN", func(t *testing.T) {
		t.Parallel()
		_, err := pollWith(t)(wool.CredentialsFromPEM(pki.CAPEM, pki.Leaf.KeyPEM, pki.Leaf.CertPEM, true, "elsewhere.example"))
		requireKind(t, err, wool.ErrHandshake)
	})
	t.Run("wrong CA", func(t *testing.T) {
		t.Parallel()
		_, err := pollWith(t)(wool.CredentialsFromPEM(pki.OtherCAPEM, pki.Leaf.KeyPEM, pki.Leaf.CertPEM, true, ""))
		requireKind(t, err, wool.ErrHandshake)
	})
	t.Run("client certificate the worker does not trust", func(t *testing.T) {
		t.Parallel()
		// The worker rejects the client after the client has accepted the worker (a TLS 1.3
		// alert): a TLS failure, never success, and never SIGPIPE for this process.
		_, err := pollWith(t)(wool.CredentialsFromPEM(pki.CAPEM, pki.OtherLeaf.KeyPEM, pki.OtherLeaf.CertPEM, true, ""))
		requireKind(t, err, wool.ErrHandshake)
		t.Logf("as expected: %v", err)
	})
	t.Run("no client certificate", func(t *testing.T) {
		t.Parallel()
		// The worker asks for a certificate and, given none, refuses the client with an alert.
		_, err := pollWith(t)(wool.CredentialsFromPEM(pki.CAPEM, nil, nil, false, ""))
		requireKind(t, err, wool.ErrHandshake)
		t.Logf("as expected: %v", err)
	})
	t.Run("plaintext", func(t *testing.T) {
		t.Parallel()
		_, err := idle(connect(t, worker.Address))
		if err == nil {
			t.Fatal("a plaintext poll of a TLS worker succeeded")
		}
		t.Logf("as expected: %v", err)
	})
}

// Given a wool-worker serving one-way TLS, when a client that trusts its CA and presents no
// certificate polls it, then the poll succeeds (credentials from PEM or from files).
func TestOneWayTLS(t *testing.T) {
	t.Parallel()
	pki := workertest.NewPKI(t)
	worker := workertest.StartWorker(t, pki.OneWayArgs()...)

	fromPEM, err := wool.CredentialsFromPEM(pki.CAPEM, nil, nil, false, "")
	if err != nil {
		t.Fatal(err)
	}
	defer fromPEM.Close()
	fromFiles, err := wool.CredentialsFromFiles(pki.CAPath, "", "", false, "")
	if err != nil {
		t.Fatal(err)
	}
	defer fromFiles.Close()
	for _, credentials := range []*wool.Credentials{fromPEM, fromFiles} {
		mustIdle(t, connect(t, worker.Address, wool.WithCredentials(credentials)))
	}
}

// Given a server that accepts TCP and never answers, when a poll's context has a 200 ms
// deadline, then Idle returns about then with an error matching both ErrTransient and
// context.DeadlineExceeded; and the library call itself also ends by that deadline.
func TestContextDeadlineBoundsTheCall(t *testing.T) {
	t.Parallel()
	server := workertest.StartHoldServer(t)
	conn := connect(t, server.Address())

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := conn.Idle(ctx)
	took := time.Since(start)

	if took > 200*time.Millisecond+prompt {
		t.Errorf("Idle returned after %v with a 200 ms deadline", took)
	}
	werr := requireKind(t, err, wool.ErrTransient)
	if werr.Code != 4 || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("want gRPC code 4 (DEADLINE_EXCEEDED) matching context.DeadlineExceeded, got %v", err)
	}
	// The deadline was passed down to the library, so its call does not outlive it for long.
	eventually(t, "the library call ends by its own deadline", 60*time.Second, func() bool {
		return wool.CallsInFlight(conn) == 0
	})
}

// deadlineOnly is a context with a deadline but no Done channel, so that Idle cannot watch it
// and only the deadline it hands to the library can end the call.
type deadlineOnly struct {
	context.Context
	deadline time.Time
}

func (c deadlineOnly) Deadline() (time.Time, bool) { return c.deadline, true }

// Given a server that never answers, when a poll's only bound is the deadline passed down to
// the library, then the library ends the call about then as a transient DEADLINE_EXCEEDED.
func TestTheLibraryEnforcesTheDeadline(t *testing.T) {
	t.Parallel()
	server := workertest.StartHoldServer(t)
	conn := connect(t, server.Address())

	ctx := deadlineOnly{context.Background(), time.Now().Add(200 * time.Millisecond)}
	start := time.Now()
	_, err := conn.Idle(ctx)
	took := time.Since(start)

	if took < 150*time.Millisecond || took > 200*time.Millisecond+prompt {
		t.Errorf("Idle returned after %v with a 200 ms deadline", took)
	}
	if werr := requireKind(t, err, wool.ErrTransient); werr.Code != 4 {
		t.Errorf("Code = %d, want 4 (DEADLINE_EXCEEDED): %v", werr.Code, err)
	}
}

// Given a Connection whose poll was cancelled (a server that never answers, no deadline),
// when the Connection is dropped without Close and the collector runs, then its cleanup frees
// the handle: a cancelled call holds nothing.
func TestForgottenConnectionIsFreedByItsCleanup(t *testing.T) {
	t.Parallel()
	server := workertest.StartHoldServer(t)
	freed := forgetConnectionAfterACancelledCall(t, server.Address())

	eventually(t, "the cleanup frees the handle", 60*time.Second, func() bool {
		runtime.GC()
		return freed()
	})
}

// forgetConnectionAfterACancelledCall connects to address, cancels an Idle call on it, and
// returns a probe of the handle, keeping no reference to the Connection.
func forgetConnectionAfterACancelledCall(t *testing.T, address string) (freed func() bool) {
	conn, err := wool.Connect(address)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background()) // no deadline: only the cancel ends it
	time.AfterFunc(100*time.Millisecond, cancel)
	if _, err := conn.Idle(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
	if n := wool.CallsInFlight(conn); n != 0 {
		t.Fatalf("calls in flight after the cancelled call returned: %d, want 0", n)
	}
	return wool.FreedProbe(conn)
}

// Given Credentials that are never closed, when they become unreachable and the collector
// runs, then their cleanup frees the C handle.
func TestForgottenCredentialsAreFreedByTheirCleanup(t *testing.T) {
	t.Parallel()
	pki := workertest.NewPKI(t)
	credentials, err := wool.CredentialsFromPEM(pki.CAPEM, nil, nil, false, "")
	if err != nil {
		t.Fatal(err)
	}
	freed := wool.CredentialsFreedProbe(credentials)
	eventually(t, "the cleanup frees the credentials", 60*time.Second, func() bool {
		runtime.GC()
		return freed()
	})
}

// Given contexts that ended before the call, when Idle and Stop are called, then they return
// at once with the context's error, without calling the library.
func TestContextEndedBeforeTheCall(t *testing.T) {
	t.Parallel()
	conn := connect(t, "127.0.0.1:9") // never dialed

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := conn.Idle(cancelled); !errors.Is(err, context.Canceled) {
		t.Errorf("Idle(cancelled): %v", err)
	}
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	err := conn.Stop(expired, 0)
	requireKind(t, err, wool.ErrTransient)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Stop(expired): %v", err)
	}
	if n := wool.CallsInFlight(conn); n != 0 {
		t.Errorf("calls in flight: %d", n)
	}
}

// Given invalid targets and credentials, when they are used, then each fails at once with
// ErrInvalidArgument, no gRPC code, and the library's message.
func TestInvalidArguments(t *testing.T) {
	t.Parallel()
	for _, target := range []string{"", "no-port", "127.0.0.1:0", "127.0.0.1:99999", "bogus:thing:1", "host\x00:1"} {
		_, err := wool.Connect(target)
		werr := requireKind(t, err, wool.ErrInvalidArgument)
		if werr.Code != -1 || werr.Message == "" || werr.Status.String() != "WOOL_STATUS_INVALID_ARGUMENT" {
			t.Errorf("Connect(%q): %#v", target, werr)
		}
	}

	pki := workertest.NewPKI(t)
	credentials := map[string]func() (*wool.Credentials, error){
		"empty CA": func() (*wool.Credentials, error) { return wool.CredentialsFromPEM(nil, nil, nil, false, "") },
		"garbage CA": func() (*wool.Credentials, error) {
			return wool.CredentialsFromPEM([]byte("not PEM"), nil, nil, false, "")
		},
		"mutual without key": func() (*wool.Credentials, error) {
			return wool.CredentialsFromPEM(pki.CAPEM, nil, pki.Leaf.CertPEM, true, "")
		},
		"NUL in PEM": func() (*wool.Credentials, error) {
			return wool.CredentialsFromPEM(append(pki.CAPEM[:10:10], 0), nil, nil, false, "")
		},
		"bad identity": func() (*wool.Credentials, error) {
			return wool.CredentialsFromPEM(pki.CAPEM, nil, nil, false, "not a name!")
		},
		"missing file": func() (*wool.Credentials, error) {
			return wool.CredentialsFromFiles("/nonexistent/ca.pem", "", "", false, "")
		},
	}
	for name, make := range credentials {
		_, err := make()
		werr := requireKind(t, err, wool.ErrInvalidArgument)
		if werr.Code != -1 || werr.Message == "" {
			t.Errorf("%s: %#v", name, werr)
		}
	}
	_, err := wool.CredentialsFromFiles("/nonexistent/ca.pem", "", "", false, "")
	if !strings.Contains(err.Error(), "/nonexistent/ca.pem") {
		t.Errorf("the message does not name the unreadable file: %v", err)
	}
}

// Given closed handles, when they are used, then the calls fail with ErrClosed; closing twice
// is harmless.
func TestClosedHandles(t *testing.T) {
	t.Parallel()
	conn, err := wool.Connect("127.0.0.1:9")
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := idle(conn); !errors.Is(err, wool.ErrClosed) {
		t.Errorf("Idle: %v", err)
	}
	if err := conn.Stop(context.Background(), 0); !errors.Is(err, wool.ErrClosed) {
		t.Errorf("Stop: %v", err)
	}

	pki := workertest.NewPKI(t)
	credentials, err := wool.CredentialsFromPEM(pki.CAPEM, nil, nil, false, "")
	if err != nil {
		t.Fatal(err)
	}
	credentials.Close()
	credentials.Close()
	if _, err := wool.Connect("127.0.0.1:9", wool.WithCredentials(credentials)); !errors.Is(err, wool.ErrClosed) {
		t.Errorf("Connect with closed credentials: %v", err)
	}
}

// Given one connection to a wool-worker, when 100 goroutines poll it 10 times each at once,
// then every poll succeeds with a non-negative reading (and the race detector stays quiet).
func TestHundredGoroutinesShareOneConnection(t *testing.T) {
	t.Parallel()
	worker := workertest.StartWorker(t)
	conn := connect(t, worker.Address)

	const goroutines, polls = 100, 10
	errs := make(chan error, goroutines*polls)
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < polls; i++ {
				seconds, err := idle(conn)
				if err == nil && seconds < 0 {
					err = errors.New("negative reading")
				}
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := wool.CallsInFlight(conn); n != 0 {
		t.Errorf("calls in flight after all returned: %d", n)
	}
}
