package wool

// #include <stdlib.h>
// #include <math.h>
// #include "wool.h"
import "C"

import (
	"context"
	"math"
	"runtime"
	"sync"
	"time"
)

// Calls run on the library's completion queue (wool.h's wool_queue): a call is started
// without blocking (wool_idle_start, wool_stop_start) and its goroutine then waits on a channel
// for the call's completion, or for its context to end, in which case the call is cancelled
// (wool_cancel resets its HTTP/2 stream) and its completion, now WOOL_STATUS_CANCELLED, is
// awaited before the goroutine returns. So a call holds no OS thread while it waits and
// nothing outlives the Go call that made it.
//
// The process has one queue, made on first use and never freed, and one dispatcher goroutine
// that waits in wool_queue_next with no timeout (a cgo call, so the OS thread under it is
// parked in the library meanwhile: one thread for the whole process, whatever the number of
// calls) and hands each completion to the channel registered under its tag. Waiting in C
// rather than on the queue's file descriptor through Go's netpoller costs that one thread but
// needs no descriptor handed to package os (whose File closes it, which the library forbids)
// and no reliance on how the descriptor's readiness meets the netpoller's edge-triggered
// epoll; it relies only on wool_queue_next's documented blocking. And the thread waiting in
// wool_queue_next drives the library's runtime itself: the calls' I/O runs on it and their
// completions are written where it reads them, with no library thread in between, so the only
// hand-off left per call is a Go channel send. Tags, not call ids, key the waiters: a
// tag is chosen and registered before its call starts, so a completion can never arrive
// before its waiter is known. The dispatcher never blocks on a send: every channel has room
// for every completion that can be owed to it.

// batchSize is how many completions the dispatcher collects per wool_queue_next.
const batchSize = 256

// outcome is one collected completion, in Go terms.
type outcome struct {
	status  Status  // the call's status
	code    int     // the gRPC code of a failure, codeNone when none
	seconds float64 // an idle call's reading on StatusOK
	message string  // the failure's message ("" on success)
}

// waiter is where a started call's completion goes.
type waiter struct {
	done chan<- outcome // buffered: always has room for this completion
}

// completions is the process-wide queue and its waiters.
var completions struct {
	mu      sync.Mutex
	queue   *C.wool_queue // nil until the first call makes it
	waiters map[uint64]waiter
	lastTag uint64
}

// register returns the queue (making it and its dispatcher on first use) and a fresh tag
// under which w will receive its call's completion. The error comes from wool_queue_new (op
// and target name the call that needed the queue); a failure is not remembered, so a later
// call tries again.
func register(op, target string, w waiter) (*C.wool_queue, uint64, error) {
	completions.mu.Lock()
	defer completions.mu.Unlock()
	if completions.queue == nil {
		var queue *C.wool_queue
		if err := call(op, target, func() C.wool_status { return C.wool_queue_new(&queue) }); err != nil {
			return nil, 0, err
		}
		completions.queue = queue
		completions.waiters = make(map[uint64]waiter)
		go dispatch(queue)
	}
	completions.lastTag++
	tag := completions.lastTag
	completions.waiters[tag] = w
	return completions.queue, tag, nil
}

// unregister forgets the waiter of a call that did not start.
func unregister(tag uint64) {
	completions.mu.Lock()
	defer completions.mu.Unlock()
	delete(completions.waiters, tag)
}

// dispatch collects completions for good and delivers each to its waiter. Its thread waits in
// the library (wool_queue_next with no timeout) whenever nothing is to be delivered; call
// pins it only for that wait and the reading of a failure's last error.
func dispatch(queue *C.wool_queue) {
	// C memory, never freed (the dispatcher lives as long as the process): the library writes
	// into it while this goroutine is blocked in C.
	batch := (*[batchSize]C.wool_completion)(C.calloc(batchSize, C.sizeof_wool_completion))
	outcomes := make([]outcome, 0, batchSize)
	tags := make([]uint64, 0, batchSize)
	for {
		var count C.size_t
		err := call("collect", "", func() C.wool_status {
			return C.wool_queue_next(queue, &batch[0], batchSize, C.double(math.Inf(1)), &count)
		})
		if err != nil {
			// Not expected (the arguments are good): a library bug. Fail the calls waiting
			// rather than leave them hanging, then try again.
			e := err.(*Error)
			failWaiting(outcome{status: e.Status, code: e.Code, message: "collecting completions: " + e.Message})
			time.Sleep(10 * time.Millisecond)
			continue
		}
		outcomes, tags = outcomes[:0], tags[:0]
		for i := range int(count) {
			c := &batch[i]
			o := outcome{status: Status(c.status), code: int(c.rpc_code), seconds: float64(c.seconds)}
			if o.status != StatusOK {
				o.message = C.GoString(&c.message[0])
			}
			outcomes = append(outcomes, o)
			tags = append(tags, uint64(c.tag))
		}
		completions.mu.Lock()
		for i, tag := range tags {
			if w, ok := completions.waiters[tag]; ok {
				delete(completions.waiters, tag)
				w.done <- outcomes[i] // never blocks: the channel has room for it
			}
		}
		completions.mu.Unlock()
		// Let the goroutines just readied run on this thread now, before it goes back to wait
		// in C: otherwise they sit on this P while the thread is in C, until another thread
		// is woken to steal them (a thread hop that doubled a lone call's latency).
		runtime.Gosched()
	}
}

// failWaiting delivers o to every waiter and forgets them (their calls' completions, should
// they still come, find no waiter and are dropped).
func failWaiting(o outcome) {
	completions.mu.Lock()
	defer completions.mu.Unlock()
	for tag, w := range completions.waiters {
		delete(completions.waiters, tag)
		w.done <- o
	}
}

// inLibrary bounds the goroutines inside a starting or cancelling library call at once. Such a
// call is short, but each goroutine inside one holds an OS thread, and when the machine is
// busy (a thread holding the queue's lock descheduled, say) the Go runtime gives the other
// goroutines new threads to run on, which then enter the library too: 10,000 goroutines
// starting at once on a loaded machine were seen on 71 threads. Goroutines waiting for a slot
// are parked, holding none.
var inLibrary = make(chan struct{}, max(2, runtime.GOMAXPROCS(0)))

// startFunc starts one call on conn into queue under tag, writing its id to *id.
type startFunc func(conn *C.wool_connection, queue *C.wool_queue, timeout C.double, tag C.uint64_t, id *C.uint64_t) C.wool_status

// startedCall is a call in flight, for cancelling it.
type startedCall struct {
	queue *C.wool_queue
	id    C.uint64_t
}

// cancel cancels the call if it is still in flight; either way its completion is in the queue
// (or already delivered) when cancel returns, so its waiter receives it without delay.
func (s startedCall) cancel() {
	inLibrary <- struct{}{}
	C.wool_cancel(s.queue, s.id) // fails only for a NULL queue
	<-inLibrary
}

// start registers w and starts one call on the Connection's handle with timeout; the call's
// completion will be sent to w. The handle is held against a concurrent Close (and the
// cleanup) only while the call starts: the library lets a handle be freed while calls started
// on it are in flight. On success the call counts as in flight on c (handle.inFlight) until
// its waiter has received the completion and takes it off. When ctx ends while the call waits
// for a slot to start in, it is not started and the context's error is returned.
func (c *Connection) start(ctx context.Context, op string, timeout C.double, w waiter, begin startFunc) (startedCall, error) {
	select {
	case inLibrary <- struct{}{}:
	case <-ctx.Done():
		return startedCall{}, contextError(op, c.target, ctx.Err())
	}
	defer func() { <-inLibrary }()
	queue, tag, err := register(op, c.target, w)
	if err != nil {
		return startedCall{}, err
	}
	var id C.uint64_t
	err = c.handle.use(func(ptr *C.wool_connection) error {
		return call(op, c.target, func() C.wool_status { return begin(ptr, queue, timeout, C.uint64_t(tag), &id) })
	})
	runtime.KeepAlive(c)
	if err != nil {
		unregister(tag)
		return startedCall{}, wrapClosed(op, c.target, err)
	}
	c.handle.inFlight.Add(1)
	return startedCall{queue: queue, id: id}, nil
}

// do starts one call with ctx's deadline as its timeout, waits for its completion, cancels it
// when ctx ends first (and then waits for the cancellation's completion, which is immediate),
// and returns the completion with its error.
func (c *Connection) do(ctx context.Context, op string, begin startFunc) (outcome, error) {
	if err := ctx.Err(); err != nil {
		return outcome{}, contextError(op, c.target, err)
	}
	timeout, ok := timeoutSeconds(ctx)
	if !ok {
		return outcome{}, contextError(op, c.target, context.DeadlineExceeded)
	}
	done := make(chan outcome, 1)
	started, err := c.start(ctx, op, timeout, waiter{done: done}, begin)
	if err != nil {
		return outcome{}, err
	}
	var o outcome
	select {
	case o = <-done:
	case <-ctx.Done(): // a nil channel (a context that never ends) never fires
		started.cancel()
		o = <-done // the cancellation, or the real answer if it came first
	}
	c.handle.inFlight.Add(-1)
	return o, c.result(ctx, op, o)
}

// result is the error of a completion: nil on success; the context's error for a call
// cancelled because its context ended; otherwise the library's failure as an *Error, linked
// to the context's deadline when that is what ended it.
func (c *Connection) result(ctx context.Context, op string, o outcome) error {
	switch {
	case o.status == StatusOK:
		return nil
	case o.status == StatusCancelled && ctx.Err() != nil:
		return contextError(op, c.target, ctx.Err())
	}
	err := &Error{Op: op, Target: c.target, Status: o.status, Code: o.code, Message: o.message}
	if err.Status == StatusTransient && err.Code == codeDeadlineExceeded {
		// The library's own deadline is the context's (a hair later, as it is computed later),
		// and may fire before the context's timer has marked the context done.
		if ctxErr := ctx.Err(); ctxErr != nil {
			err.cause = ctxErr
		} else if deadline, ok := ctx.Deadline(); ok && !time.Now().Before(deadline) {
			err.cause = context.DeadlineExceeded
		}
	}
	return err
}
