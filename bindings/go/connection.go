package wool

// #include <stdlib.h>
// #include <math.h>
// #include "wool.h"
import "C"

import (
	"context"
	"errors"
	"math"
	"runtime"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"
)

// GraceForever is the grace for Stop that lets in-flight tasks run however long they take.
// Any negative grace means the same.
const GraceForever time.Duration = -1

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

// connHandle is the C handle of a Connection. It is separate from the Connection so that the
// cleanup can close it without keeping the Connection reachable. The library owns the handle's
// lifetime (docs/C-API.md, "Handles"): it may be freed while calls on it run, and a freed
// handle is refused with StatusInvalidArgument, never read. So the binding keeps only whether
// it has freed it, to say ErrClosed.
type connHandle struct {
	ptr   *C.wool_connection // an opaque value naming the library's handle, never dereferenced
	freed atomic.Bool        // set once, by the one close that frees ptr
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
	if strings.IndexByte(target, 0) >= 0 {
		return nil, invalidArgument("connect", target, "the target contains a NUL byte")
	}
	cTarget := C.CString(target)
	defer C.free(unsafe.Pointer(cTarget))
	return newConnection(target, opts, func(credentials *C.wool_credentials, channel *C.wool_channel_options, out **C.wool_connection) C.wool_status {
		if channel == nil {
			return C.wool_connect(cTarget, credentials, out)
		}
		return C.wool_connect_with_options(cTarget, credentials, channel, out)
	})
}

// newConnection applies opts, makes the library's channel options (nil when none were given:
// Wool's defaults), and runs make with them and the credentials' C handle (nil for
// plaintext), wrapping the handle it writes in a Connection to target. Errors are Connect's.
func newConnection(target string, opts []Option, make func(credentials *C.wool_credentials, channel *C.wool_channel_options, out **C.wool_connection) C.wool_status) (*Connection, error) {
	var options connectOptions
	for _, opt := range opts {
		opt(&options)
	}
	var channel *C.wool_channel_options // nil: Wool's defaults
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
	var ptr *C.wool_connection
	connect := func(credentials *C.wool_credentials) error {
		return call("connect", target, func() C.wool_status {
			return make(credentials, channel, &ptr)
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
// cancelled or its deadline passes, the call is cancelled in the library (its HTTP/2 stream is
// reset, so the worker sees the cancellation) and Idle returns at once; nothing of the call
// outlives Idle. While it waits, Idle holds no OS thread: any number of goroutines may poll at
// once (see "Concurrency and lifetime" in the package documentation).
//
// Errors (match with errors.Is):
//   - ErrIdleUnavailable: the worker predates the idle RPC (gRPC code 12, UNIMPLEMENTED).
//   - ErrTransient: unreachable, shutting down, stopped answering keepalive PINGs, or the
//     deadline passed; a passed context deadline also matches context.DeadlineExceeded.
//   - ErrHandshake: a TLS failure. ErrRPC: any other gRPC failure.
//   - context.Canceled (wrapped, not an *Error) when ctx was cancelled.
//   - ErrClosed when the Connection is closed.
func (c *Connection) Idle(ctx context.Context) (time.Duration, error) {
	o, err := c.idle(ctx)
	if err != nil {
		return 0, err
	}
	return durationFromSeconds(o.seconds), nil
}

// idle is do for an idle poll, started in a batch with the polls other goroutines start at
// the same time (see batchIdle).
func (c *Connection) idle(ctx context.Context) (outcome, error) {
	const op = "idle"
	if err := ctx.Err(); err != nil {
		return outcome{}, contextError(op, c.target, err)
	}
	timeout, ok := timeoutSeconds(ctx)
	if !ok {
		return outcome{}, contextError(op, c.target, context.DeadlineExceeded)
	}
	if c.handle.freed.Load() {
		return outcome{}, opError(op, c.target, ErrClosed)
	}
	done := make(chan outcome, 1)
	started, err := c.batchIdle(timeout, waiter{done: done, on: []*connHandle{c.handle}})
	if err != nil {
		return outcome{}, err
	}
	o, err := c.await(ctx, op, done, started)
	runtime.KeepAlive(c) // the handle is not closed by the cleanup while the poll runs
	return o, err
}

// Stop retires the worker: it refuses new tasks at once, lets in-flight tasks run for up to
// grace, cancels whatever is left, answers, and then its process ends. Stop returns once the
// worker has answered, that is after its drain.
//
// grace 0 cancels in-flight tasks at once; GraceForever (any negative grace) waits for them
// however long they take. The context's deadline bounds the whole call, drain included: to see
// the answer it must exceed grace (use no deadline with GraceForever). A repeated Stop is
// harmless while the worker is still draining; once it is gone, Stop fails with ErrTransient.
// When ctx ends first, the call is cancelled as for Idle: Stop returns at once, but a worker
// that already received the request may retire all the same.
//
// Errors are as for Idle, except that a worker without the stop RPC gives ErrRPC.
func (c *Connection) Stop(ctx context.Context, grace time.Duration) error {
	graceSeconds := C.double(-1)
	if grace >= 0 {
		graceSeconds = C.double(grace.Seconds())
	}
	_, err := c.do(ctx, "stop", func(conn *C.wool_connection, queue *C.wool_queue, timeout C.double, tag C.uint64_t, id *C.uint64_t) C.wool_status {
		return C.wool_stop_start(conn, queue, graceSeconds, timeout, tag, id)
	})
	return err
}

// Close releases the Connection's handle (its share of the pooled channel); the worker is not
// affected. Later calls fail with ErrClosed. Calls in flight, an IdleMany sweep or a RetireIdle
// round among them, are not interrupted: the library keeps what they need, and they complete
// (or fail, or end with their context) as they would have. Close waits for nothing, is
// idempotent, and always returns nil.
func (c *Connection) Close() error {
	c.handle.close()
	c.cleanup.Stop() // a no-op when already stopped
	runtime.KeepAlive(c)
	return nil
}

// use runs f with the C handle; ErrClosed once closed, also when a Close on another goroutine
// frees the handle before the library looks it up (see closedIfFreed).
func (h *connHandle) use(f func(*C.wool_connection) error) error {
	if h.freed.Load() {
		return ErrClosed
	}
	return closedIfFreed(f(h.ptr), &h.freed)
}

// close frees the C handle once. Idempotent: Close and the cleanup may both run it, on any
// goroutine, while calls on the handle are in flight: the library lets them finish.
func (h *connHandle) close() {
	if h.freed.CompareAndSwap(false, true) {
		C.wool_free(h.ptr)
	}
}

// closedIfFreed is ErrClosed for the library's refusal of a handle this binding has freed
// (StatusInvalidArgument while freed is set), and err otherwise.
func closedIfFreed(err error, freed *atomic.Bool) error {
	var e *Error
	if errors.As(err, &e) && e.Status == StatusInvalidArgument && freed.Load() {
		return ErrClosed
	}
	return err
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
