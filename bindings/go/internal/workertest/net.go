package workertest

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// HoldServer accepts TCP connections and never answers on them: a worker that hangs. Calls to
// it end only by their deadline, or when Release drops the connections.
type HoldServer struct {
	listener net.Listener
	mu       sync.Mutex
	conns    []net.Conn
	released bool
}

// StartHoldServer listens on a free port of 127.0.0.1; the test's cleanup releases it.
func StartHoldServer(t testing.TB) *HoldServer {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &HoldServer{listener: listener}
	go s.accept()
	t.Cleanup(s.Release)
	return s
}

// Address is the server's host:port.
func (s *HoldServer) Address() string { return s.listener.Addr().String() }

func (s *HoldServer) accept() {
	for {
		conn, err := s.listener.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.released {
			conn.Close()
		} else {
			s.conns = append(s.conns, conn)
		}
		s.mu.Unlock()
	}
}

// Release stops listening and closes every held connection, so that calls blocked on them
// fail (with a transient error) instead of waiting forever. Idempotent.
func (s *HoldServer) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.released {
		return
	}
	s.released = true
	s.listener.Close()
	for _, conn := range s.conns {
		conn.Close()
	}
}

// Dispatch is one task in flight on a plaintext wool-worker, dispatched over a minimal
// hand-framed gRPC call (the Go standard library's HTTP/2 without TLS, protobuf written by
// hand), so that the tests need no gRPC modules or generated stubs. The worker counts a
// dispatch as in flight from its acceptance until its stream ends, so holding the stream
// open holds the task in flight for as long as the test wants.
type Dispatch struct {
	cancel    context.CancelFunc
	transport *http.Transport
	body      io.ReadCloser
}

// StartDispatch dispatches routine(args) to the plaintext worker at address and returns once
// the worker acknowledged it (so it is in the worker's in-flight set). End ends it; the test's
// cleanup does too.
func StartDispatch(t testing.TB, address, routine string, args []byte) *Dispatch {
	t.Helper()
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	transport := &http.Transport{Protocols: &protocols}
	ctx, cancel := context.WithCancel(context.Background())
	d := &Dispatch{cancel: cancel, transport: transport}
	t.Cleanup(d.End)

	requests, requestWriter := io.Pipe()
	go func() { // the first request carries the task; the stream stays open after it
		_, _ = requestWriter.Write(grpcFrame(dispatchRequest(routine, args)))
	}()
	url := "http://" + address + "/wool.runtime.protobuf.wire.Worker/dispatch"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, requests)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("TE", "trailers")
	resp, err := transport.RoundTrip(req)
	if err != nil {
		t.Fatalf("dispatch %s to %s: %v", routine, address, err)
	}
	d.body = resp.Body
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("dispatch %s to %s: HTTP %s", routine, address, resp.Status)
	}
	first, err := readFrame(resp.Body, 10*time.Second)
	if err != nil {
		t.Fatalf("dispatch %s to %s: no first response (gRPC status %q %q): %v", routine, address,
			resp.Trailer.Get("Grpc-Status")+resp.Header.Get("Grpc-Status"),
			resp.Trailer.Get("Grpc-Message")+resp.Header.Get("Grpc-Message"), err)
	}
	// Response { oneof payload { 1 ack; 2 nack; ... } }: an ack starts with field 1, bytes.
	if len(first) == 0 || first[0] != 0x0a {
		t.Fatalf("dispatch %s to %s: first response is not an ack: % x", routine, address, first)
	}
	return d
}

// End ends the dispatch by resetting its stream (the worker drops the task from its in-flight
// set). Idempotent.
func (d *Dispatch) End() {
	d.cancel()
	if d.body != nil {
		d.body.Close()
	}
	d.transport.CloseIdleConnections()
}

// dispatchRequest encodes Request { task: Task { callable: routine, args: args } } (wire
// contract: Request.task = 1; Task.callable = 7, Task.args = 8; all length-delimited).
func dispatchRequest(routine string, args []byte) []byte {
	var task []byte
	task = appendBytesField(task, 7, []byte(routine))
	task = appendBytesField(task, 8, args)
	return appendBytesField(nil, 1, task)
}

func appendBytesField(b []byte, field int, value []byte) []byte {
	b = binary.AppendUvarint(b, uint64(field<<3|2))
	b = binary.AppendUvarint(b, uint64(len(value)))
	return append(b, value...)
}

// grpcFrame prefixes a message with gRPC's 5-byte header (not compressed, big-endian length).
func grpcFrame(message []byte) []byte {
	frame := make([]byte, 5, 5+len(message))
	binary.BigEndian.PutUint32(frame[1:], uint32(len(message)))
	return append(frame, message...)
}

// readFrame reads one gRPC message from r within timeout.
func readFrame(r io.Reader, timeout time.Duration) ([]byte, error) {
	type result struct {
		message []byte
		err     error
	}
	done := make(chan result, 1)
	go func() {
		var header [5]byte
		if _, err := io.ReadFull(r, header[:]); err != nil {
			done <- result{err: err}
			return
		}
		message := make([]byte, binary.BigEndian.Uint32(header[1:]))
		_, err := io.ReadFull(r, message)
		done <- result{message, err}
	}()
	select {
	case res := <-done:
		return res.message, res.err
	case <-time.After(timeout):
		return nil, fmt.Errorf("timed out after %v", timeout)
	}
}
