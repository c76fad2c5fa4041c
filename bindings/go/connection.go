package wool

// #include <stdlib.h>
// #include <math.h>
// #include "wool.h"
import "C"

import (
	"context"
	"math"
	"runtime"
	"strings"
	"sync"
	"time"
	"unsafe"
)

// GraceForever is the grace for Stop that lets in-flight tasks run however long they take.
// Any negative grace means the same.
const GraceForever time.Duration = -1

// MaxBlockingCalls bounds the library calls blocked at once across the process (each holds an
// OS thread). Further calls wait for a slot, giving up when their context ends, so a storm of
// abandoned calls to a worker that never answers cannot exhaust the Go runtime's threads.
const MaxBlockingCalls = 1024

var blockingCalls = make(chan struct{}, MaxBlockingCalls)

// Connection is a lazy handle to one worker, like Wool's WorkerConnection: Connect does no
// I/O, and a worker that cannot be reached shows up on the first Idle or Stop as ErrTransient.
// Connections to the same target with equal credentials and equal channel options share one
// pooled HTTP/2 channel inside the library. Safe for concurrent use by many goroutines.
//
// Close it when done. A cleanup (runtime.AddCleanup) closes a forgotten Connection as a safety
// net, but only once the garbage collector notices it, which a program with little Go garbage
// may never do; until then the handle keeps its share of the pooled channel (a socket and
// buffers that live in C memory, invisible to the collector).
type Connection struct {
	target  string
	handle  *connHandle
	cleanup runtime.Cleanup // closes handle once the Connection is unreachable
}

// connHandle is the C handle of a Connection and its bookkeeping. It is separate from the
// Connection so that the cleanup can close it without keeping the Connection reachable; calls
// abandoned by their context hold the handle, not the Connection.
type connHandle struct {
	mu     sync.Mutex
	ptr    *C.wool_connection // nil once freed
	closed bool               // Close (or the cleanup) ran; ptr is freed when calls drops to 0
	calls  int                // C calls in flight, including ones abandoned by their context
}

// Option configures Connect.
type Option func(*connectOptions)

type connectOptions struct {
	credentials *Credentials
	channel     []channelSetting // channel options (options.go), in the order given
}

// WithCredentials makes Connect use TLS with these credentials (mutual or one-way, as they
// were made). Without it the connection is plaintext. The Connection keeps its own copy.
func WithCredentials(credentials *Credentials) Option {
	return func(o *connectOptions) { o.credentials = credentials }
}

// Connect makes a Connection to the worker at target: "host:port", "dns:host:port",
// "dns:///host:port", "ipv4:address:port", "ipv6:[address]:port", "[v6address]:port" or
// "unix:path" (ports 1-65535). It does no I/O.
//
// Without channel options (WithKeepalive, WithConnectTimeout and the others) the connection
// uses Wool's defaults.
//
// Returns an *Error matching ErrInvalidArgument when the target is not valid (empty, no port,
// port out of range, unknown scheme, a NUL byte) or the library refuses a channel option's
// value (the message names the option), and ErrClosed when the credentials given with
// WithCredentials are closed.
func Connect(target string, opts ...Option) (*Connection, error) {
	var options connectOptions
	for _, opt := range opts {
		opt(&options)
	}
	if strings.IndexByte(target, 0) >= 0 {
		return nil, invalidArgument("connect", target, "the target contains a NUL byte")
	}
	var channel *C.wool_channel_options // nil: Wool's defaults, through plain wool_connect
	if len(options.channel) > 0 {
		if err := call("connect", target, func() C.wool_status {
			return C.wool_channel_options_new(&channel)
		}); err != nil {
			return nil, err
		}
		defer C.wool_channel_options_free(channel) // the connection keeps its own copy
		for _, set := range options.channel {
			if err := set(channel, target); err != nil {
				return nil, err
			}
		}
	}
	cTarget := C.CString(target)
	defer C.free(unsafe.Pointer(cTarget))
	var ptr *C.wool_connection
	connect := func(credentials *C.wool_credentials) error {
		return call("connect", target, func() C.wool_status {
			if channel == nil {
				return C.wool_connect(cTarget, credentials, &ptr)
			}
			return C.wool_connect_with_options(cTarget, credentials, channel, &ptr)
		})
	}
	var err error
	if options.credentials == nil {
		err = connect(nil)
	} else {
		err = options.credentials.use(connect)
	}
	if err != nil {
		return nil, wrapClosed("connect", target, err)
	}
	c := &Connection{target: target, handle: &connHandle{ptr: ptr}}
	c.cleanup = runtime.AddCleanup(c, (*connHandle).close, c.handle)
	return c, nil
}

// Target returns the target the Connection was made with.
func (c *Connection) Target() string { return c.target }

// Idle returns how long the worker has been continuously idle: exactly 0 while any task is
// in flight on it, else the time since its in-flight set last became empty (or since it
// started).
//
// The context's deadline becomes the call's deadline; without one the call waits however
// long the worker takes, as long as its connection answers keepalive PINGs (see WithKeepalive:
// with Wool's defaults a frozen worker fails the call within about a minute). When ctx is
// cancelled or its deadline passes, Idle returns at once (the library call it started
// finishes in the background and then releases its resources).
//
// Errors (match with errors.Is):
//   - ErrIdleUnavailable: the worker predates the idle RPC (gRPC code 12, UNIMPLEMENTED).
//   - ErrTransient: unreachable, shutting down, stopped answering keepalive PINGs, or the
//     deadline passed; a passed context deadline also matches context.DeadlineExceeded.
//   - ErrHandshake: a TLS failure. ErrRPC: any other gRPC failure.
//   - context.Canceled (wrapped, not an *Error) when ctx was cancelled.
//   - ErrClosed when the Connection is closed.
func (c *Connection) Idle(ctx context.Context) (time.Duration, error) {
	var seconds C.double
	err := c.do(ctx, "idle", func(conn *C.wool_connection, timeout C.double) C.wool_status {
		return C.wool_idle(conn, timeout, &seconds)
	})
	if err != nil {
		return 0, err
	}
	return durationFromSeconds(float64(seconds)), nil
}

// Stop retires the worker: it refuses new tasks at once, lets in-flight tasks run for up to
// grace, cancels whatever is left, answers, and then its process ends. Stop returns once the
// worker has answered, that is after its drain.
//
// grace 0 cancels in-flight tasks at once; GraceForever (any negative grace) waits for them
// however long they take. The context's deadline bounds the whole call, drain included: to see
// the answer it must exceed grace (use no deadline with GraceForever). A repeated Stop is
// harmless while the worker is still draining; once it is gone, Stop fails with ErrTransient.
//
// Errors are as for Idle, except that a worker without the stop RPC gives ErrRPC.
func (c *Connection) Stop(ctx context.Context, grace time.Duration) error {
	graceSeconds := C.double(-1)
	if grace >= 0 {
		graceSeconds = C.double(grace.Seconds())
	}
	return c.do(ctx, "stop", func(conn *C.wool_connection, timeout C.double) C.wool_status {
		return C.wool_stop(conn, graceSeconds, timeout)
	})
}

// Close releases the Connection's handle (its share of the pooled channel); the worker is not
// affected. Later calls fail with ErrClosed. Calls already running are not interrupted: the
// handle is released when the last of them returns, even one whose caller gave up on it
// because its context ended. Close does not wait for them, is idempotent, and always returns
// nil.
func (c *Connection) Close() error {
	c.handle.close()
	c.cleanup.Stop() // a no-op when already stopped
	runtime.KeepAlive(c)
	return nil
}

// do runs one blocking library call on the handle with ctx's deadline as its timeout, and
// returns when the call does or when ctx ends, whichever comes first.
func (c *Connection) do(ctx context.Context, op string, f func(*C.wool_connection, C.double) C.wool_status) error {
	if err := ctx.Err(); err != nil {
		return contextError(op, c.target, err)
	}
	timeout, ok := timeoutSeconds(ctx)
	if !ok {
		return contextError(op, c.target, context.DeadlineExceeded)
	}
	// Each blocking C call holds an OS thread until the library answers; calls abandoned by
	// their context (a worker that never answers, no deadline) would otherwise pile up threads
	// until the Go runtime's limit kills the process. Wait for a slot instead.
	select {
	case blockingCalls <- struct{}{}:
	case <-ctx.Done():
		return contextError(op, c.target, ctx.Err())
	}
	ptr, err := c.handle.acquire()
	if err != nil {
		<-blockingCalls
		return wrapClosed(op, c.target, err)
	}
	run := func() error {
		defer func() { <-blockingCalls }()
		defer c.handle.release()
		err := call(op, c.target, func() C.wool_status { return f(ptr, timeout) })
		runtime.KeepAlive(c) // the handle is counted in use anyway; this keeps the cleanup off too
		return err
	}
	if ctx.Done() == nil { // a context that never ends: no goroutine needed
		return c.withCause(ctx, run())
	}
	// The C call cannot be interrupted, so it runs on its own goroutine, which keeps the
	// handle acquired until the call returns, even after this method has given up on it.
	done := make(chan error, 1)
	go func() { done <- run() }()
	select {
	case err := <-done:
		return c.withCause(ctx, err)
	case <-ctx.Done():
		select {
		case err := <-done: // finished at the same moment: prefer the real answer
			return c.withCause(ctx, err)
		default:
			return contextError(op, c.target, ctx.Err())
		}
	}
}

// withCause links a library deadline failure to the context's deadline, so that it matches
// context.DeadlineExceeded just like the failure produced when the context wins the race.
func (c *Connection) withCause(ctx context.Context, err error) error {
	if e, ok := err.(*Error); ok && e.Status == StatusTransient && e.Code == codeDeadlineExceeded {
		if ctxErr := ctx.Err(); ctxErr != nil {
			e.cause = ctxErr
		}
	}
	return err
}

// acquire returns the C handle for one call and counts the call in flight; ErrClosed once
// the handle was closed.
func (h *connHandle) acquire() (*C.wool_connection, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	h.calls++
	return h.ptr, nil
}

// release ends a call counted by acquire; the last call to end after close frees the handle
// (the C contract: wool_free only after every other call on the handle has returned).
func (h *connHandle) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls--
	h.freeIfUnused()
}

// close marks the handle closed and frees it unless calls are in flight (then the last of them
// does). Idempotent: Close and the cleanup may both run it.
func (h *connHandle) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.closed = true
		h.freeIfUnused()
	}
}

// freeIfUnused frees the handle once it is closed and no call is in flight (h.mu held).
func (h *connHandle) freeIfUnused() {
	if h.closed && h.calls == 0 && h.ptr != nil {
		C.wool_free(h.ptr)
		h.ptr = nil
	}
}

// timeoutSeconds converts ctx's deadline into the library's timeout: the seconds left, or
// INFINITY without a deadline; ok is false when the deadline has already passed (the library
// takes only positive timeouts).
func timeoutSeconds(ctx context.Context) (seconds C.double, ok bool) {
	deadline, has := ctx.Deadline()
	if !has {
		return C.double(math.Inf(1)), true
	}
	left := time.Until(deadline)
	return C.double(left.Seconds()), left > 0
}

// durationFromSeconds converts the library's seconds, clamping what time.Duration cannot hold.
func durationFromSeconds(seconds float64) time.Duration {
	const most = float64(math.MaxInt64) / float64(time.Second)
	switch {
	case math.IsNaN(seconds) || seconds <= 0:
		return 0
	case seconds >= most:
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(seconds * float64(time.Second))
}

// wrapClosed names the operation in an ErrClosed; other errors pass through.
func wrapClosed(op, target string, err error) error {
	if err == ErrClosed {
		return opError(op, target, err)
	}
	return err
}
