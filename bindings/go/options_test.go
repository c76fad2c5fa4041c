package wool_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	wool "github.com/libwool/libwool/bindings/go"
	"github.com/libwool/libwool/bindings/go/internal/workertest"
)

// Given a wool-worker, when connections are made with each channel option at a good value
// (and with all of them at once), then each Connect succeeds and a poll through it succeeds.
func TestChannelOptionsAreAccepted(t *testing.T) {
	t.Parallel()
	worker := workertest.StartWorker(t)

	for name, opts := range map[string][]wool.Option{
		"WithKeepalive":                   {wool.WithKeepalive(10*time.Second, 5*time.Second)},
		"WithKeepalive at 1 ms":           {wool.WithKeepalive(time.Millisecond, time.Millisecond)},
		"WithoutKeepalive":                {wool.WithoutKeepalive()},
		"WithKeepaliveWithoutCalls false": {wool.WithKeepaliveWithoutCalls(false)},
		"WithKeepaliveWithoutCalls true":  {wool.WithKeepaliveWithoutCalls(true)},
		"WithMaxPingsWithoutData 0":       {wool.WithMaxPingsWithoutData(0)},
		"WithMaxPingsWithoutData 5":       {wool.WithMaxPingsWithoutData(5)},
		"WithMaxReceiveMessageSize":       {wool.WithMaxReceiveMessageSize(4 << 20)},
		"WithMaxReceiveMessageSize most":  {wool.WithMaxReceiveMessageSize(math.MaxUint32)},
		"WithMaxSendMessageSize":          {wool.WithMaxSendMessageSize(4 << 20)},
		"WithMaxConcurrentStreams":        {wool.WithMaxConcurrentStreams(8)},
		"WithMaxConcurrentStreams 1":      {wool.WithMaxConcurrentStreams(1)},
		"WithConnectTimeout":              {wool.WithConnectTimeout(5 * time.Second)},
		"WithoutConnectTimeout":           {wool.WithoutConnectTimeout()},
		"the last of a repeated option":   {wool.WithMaxReceiveMessageSize(1), wool.WithMaxReceiveMessageSize(1 << 20)},
		"all at once": {
			wool.WithKeepalive(2*time.Second, time.Second), wool.WithKeepaliveWithoutCalls(true),
			wool.WithMaxPingsWithoutData(3), wool.WithMaxReceiveMessageSize(1 << 20),
			wool.WithMaxSendMessageSize(1 << 20), wool.WithMaxConcurrentStreams(16),
			wool.WithConnectTimeout(3 * time.Second),
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			mustIdle(t, connect(t, worker.Address, opts...))
		})
	}
}

// Given channel options with bad values (zero, negative, below 1 ms, out of range), when
// Connect is called with them, then it fails at once with ErrInvalidArgument, no gRPC code, and
// a message naming the library's option; a good option next to the bad one does not help.
func TestChannelOptionsRefuseBadValues(t *testing.T) {
	t.Parallel()
	for _, bad := range []struct {
		name   string
		option wool.Option
		names  string // the library's name of the option, which the message must hold
	}{
		{"keepalive interval 0", wool.WithKeepalive(0, time.Second), "keepalive_interval"},
		{"keepalive interval negative", wool.WithKeepalive(-time.Second, time.Second), "keepalive_interval"},
		{"keepalive interval below 1 ms", wool.WithKeepalive(time.Microsecond, time.Second), "keepalive_interval"},
		{"keepalive timeout 0", wool.WithKeepalive(time.Second, 0), "keepalive_timeout"},
		{"keepalive timeout negative", wool.WithKeepalive(time.Second, -time.Second), "keepalive_timeout"},
		{"keepalive timeout below 1 ms", wool.WithKeepalive(time.Second, 999*time.Microsecond), "keepalive_timeout"},
		{"max receive 0", wool.WithMaxReceiveMessageSize(0), "max_receive_message_bytes"},
		{"max receive negative", wool.WithMaxReceiveMessageSize(-1), "max_receive_message_bytes"},
		{"max receive above 4 GiB", wool.WithMaxReceiveMessageSize(math.MaxUint32 + 1), "max_receive_message_bytes"},
		{"max send 0", wool.WithMaxSendMessageSize(0), "max_send_message_bytes"},
		{"max send negative", wool.WithMaxSendMessageSize(-100), "max_send_message_bytes"},
		{"max send above 4 GiB", wool.WithMaxSendMessageSize(math.MaxUint32 + 1), "max_send_message_bytes"},
		{"max streams 0", wool.WithMaxConcurrentStreams(0), "max_concurrent_streams"},
		{"max streams negative", wool.WithMaxConcurrentStreams(-1), "max_concurrent_streams"},
		{"max streams above int32", wool.WithMaxConcurrentStreams(math.MaxInt32 + 1), "max_concurrent_streams"},
		{"connect timeout 0", wool.WithConnectTimeout(0), "connect_timeout"},
		{"connect timeout negative", wool.WithConnectTimeout(-time.Second), "connect_timeout"},
		{"connect timeout below 1 ms", wool.WithConnectTimeout(time.Microsecond), "connect_timeout"},
	} {
		conn, err := wool.Connect("127.0.0.1:9", wool.WithMaxConcurrentStreams(10), bad.option)
		if conn != nil {
			conn.Close()
		}
		werr := requireKind(t, err, wool.ErrInvalidArgument)
		if werr.Code != -1 || werr.Op != "connect" || werr.Target != "127.0.0.1:9" {
			t.Errorf("%s: %#v", bad.name, werr)
		}
		if !strings.Contains(werr.Message, bad.names) {
			t.Errorf("%s: the message does not name %s: %v", bad.name, bad.names, err)
		}
	}
}

// Given a wool-worker and a connection that accepts answers of at most 1 byte, when it is
// polled, then the answer (a few bytes) is refused: the option reaches the channel. A
// connection without the option still polls the worker. Such a refusal is ErrTransient, gRPC
// RESOURCE_EXHAUSTED (as in Wool's gRPC), naming the limit.
func TestMaxReceiveMessageSizeTakesEffect(t *testing.T) {
	t.Parallel()
	worker := workertest.StartWorker(t)
	mustIdle(t, connect(t, worker.Address))

	_, err := idle(connect(t, worker.Address, wool.WithMaxReceiveMessageSize(1)))
	var werr *wool.Error
	if !errors.As(err, &werr) {
		t.Fatalf("a poll with a 1-byte receive limit: want an *Error, got %v", err)
	}
	if !strings.Contains(werr.Message, "max_receive_message_bytes") {
		t.Errorf("the message should name the limit: %v", err)
	}
	if werr = requireKind(t, err, wool.ErrTransient); werr.Code != 8 {
		t.Errorf("Code = %d, want 8 (RESOURCE_EXHAUSTED): %v", werr.Code, err)
	}
}

// Given a server that accepts TCP and never answers, and a TLS connection to it with a 300 ms
// connect timeout, when it is polled with no deadline, then the call fails with ErrTransient
// about 300 ms later (the TLS handshake never completes).
func TestConnectTimeoutTakesEffect(t *testing.T) {
	t.Parallel()
	server := workertest.StartHoldServer(t)
	pki := workertest.NewPKI(t)
	credentials, err := wool.CredentialsFromPEM(pki.CAPEM, nil, nil, false, "")
	if err != nil {
		t.Fatal(err)
	}
	defer credentials.Close()
	conn := connect(t, server.Address(), wool.WithCredentials(credentials),
		wool.WithConnectTimeout(300*time.Millisecond))

	took, err := idleBounded(t, conn, 10*time.Second)
	t.Logf("Idle with no deadline ended after %v", took)
	requireKind(t, err, wool.ErrTransient)
	if took < 250*time.Millisecond || took > 5*time.Second {
		t.Errorf("Idle failed after %v with a 300 ms connect timeout", took)
	}
}

// Given a wool-worker polled once through a connection with keepalive 1 s / 1 s, when the
// worker is frozen (SIGSTOP) and polled with no deadline, then the call ends within a bounded
// time (about interval + timeout) with ErrTransient naming keepalive, not never; once the worker
// is resumed (SIGCONT), the next poll succeeds on a fresh connection.
func TestFrozenWorkerEndsACallWithoutDeadlineByKeepalive(t *testing.T) {
	t.Parallel()
	worker := workertest.StartWorker(t)
	conn := connect(t, worker.Address, wool.WithKeepalive(time.Second, time.Second))
	mustIdle(t, conn)

	worker.Freeze(t)
	took, err := idleBounded(t, conn, 20*time.Second)
	worker.Thaw(t)
	t.Logf("frozen worker: Idle with no deadline ended after %v: %v", took, err)

	werr := requireKind(t, err, wool.ErrTransient)
	if werr.Code != 14 {
		t.Errorf("Code = %d, want 14 (UNAVAILABLE): %v", werr.Code, err)
	}
	if !strings.Contains(werr.Message, "keepalive") {
		t.Errorf("the message does not mention keepalive: %v", err)
	}
	if took < time.Second {
		t.Errorf("ended after %v, before a keepalive PING could even have gone unanswered", took)
	}
	mustIdle(t, conn) // the dead pooled connection was replaced
}

// idleBounded polls conn with no deadline (context.Background) on its own goroutine and
// returns its error and how long it took, failing the test if it takes longer than limit (the
// call is then left running; the test's cleanup resumes or kills the worker, which ends it).
func idleBounded(t *testing.T, conn *wool.Connection, limit time.Duration) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := conn.Idle(context.Background())
		done <- err
	}()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case err := <-done:
		return time.Since(start), err
	case <-timer.C:
		t.Fatalf("Idle with no deadline still running after %v", limit)
		return 0, nil
	}
}
