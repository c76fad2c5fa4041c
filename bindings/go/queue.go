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
	on   []*connHandle  // the handles the call runs on (read only by the tests' CallsInFlight)
}

// completions is the process-wide queue, its waiters, and the idle polls waiting to be
// started in the next batch (see batchIdle).
var completions struct {
	mu      sync.Mutex
	queue   *C.wool_queue // nil until the first call makes it
	waiters map[uint64]waiter
	lastTag uint64

	pending []*idleStart // idle polls not yet taken by a crossing, in arrival order
	spare   []*idleStart // the previous crossing's slice, reused for the next pending list
	leading bool         // whether a goroutine is starting batches (see batchIdle)

	crossings, batched uint64 // wool_idle_start_batch calls made, and the polls they carried
}

// register returns the queue (making it and its dispatcher on first use) and a fresh tag
// under which w will receive its call's completion. The error comes from wool_queue_new (op
// and target name the call that needed the queue); a failure is not remembered, so a later
// call tries again.
func register(op, target string, w waiter) (*C.wool_queue, uint64, error) {
	completions.mu.Lock()
	defer completions.mu.Unlock()
	return registerLocked(op, target, w)
}

// registerLocked is register with completions.mu held.
func registerLocked(op, target string, w waiter) (*C.wool_queue, uint64, error) {
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
// completion will be sent to w. A Close racing with the start is the library's to settle: the
// call starts (and runs to its end) or is refused as ErrClosed. When ctx ends while the call
// waits for a slot to start in, it is not started and the context's error is returned.
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
	started, err := c.start(ctx, op, timeout, waiter{done: done, on: []*connHandle{c.handle}}, begin)
	if err != nil {
		return outcome{}, err
	}
	return c.await(ctx, op, done, started)
}

// await waits for a started call's completion on done, cancelling the call when ctx ends
// first (and then waiting for the cancellation's completion, which is immediate), and returns
// the completion with its error.
func (c *Connection) await(ctx context.Context, op string, done <-chan outcome, started interface{ cancel() }) (outcome, error) {
	var o outcome
	select {
	case o = <-done:
	case <-ctx.Done(): // a nil channel (a context that never ends) never fires
		started.cancel()
		o = <-done // the cancellation, or the real answer if it came first
	}
	return o, c.result(ctx, op, o)
}

// result is the error of a completion: nil on success; the context's error for a call
// cancelled because its context ended; ErrClosed for the library's refusal of a handle closed
// before it was looked up (a sweep's slot); otherwise the library's failure as an *Error,
// linked to the context's deadline when that is what ended it.
func (c *Connection) result(ctx context.Context, op string, o outcome) error {
	switch {
	case o.status == StatusOK:
		return nil
	case o.status == StatusCancelled && ctx.Err() != nil:
		return contextError(op, c.target, ctx.Err())
	case o.status == StatusInvalidArgument && c.handle != nil && c.handle.freed.Load():
		return opError(op, c.target, ErrClosed)
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

// Idle polls start in batches: goroutines that start polls while a batch is being started
// queue theirs, and the next crossing into the library starts all of them at once
// (wool_idle_start_batch), so a burst of N goroutines pays a handful of cgo crossings, lookups
// of the handle table and locks of the library's queue instead of N of each. The goroutine that
// finds no crossing in progress becomes the leader: it starts what is pending, again and again
// while more arrives during its crossing, and leaves once nothing is pending. Nothing waits
// for a batch to fill: a lone poll crosses at once, as it did one call at a time. A poll's
// goroutine does not wait for its start: the library completes every entry of a batch into
// the queue, a refused one at once with its error, so every poll's outcome arrives as a
// completion on its channel.

// batchMost is the most polls one crossing starts (the library's WOOL_IDLE_START_BATCH_MAX
// bounds it; a crossing of more would be refused whole).
const batchMost = 256

// startState is where an idle poll is on its way to the library; guarded by completions.mu.
type startState int

const (
	startPending   startState = iota // in completions.pending
	startCrossing                    // taken by the leader's crossing under way
	startCancelled                   // its context ended during the crossing: cancel it after
	startWithdrawn                   // its context ended while pending: never started
	startStarted                     // started (or refused) by the library: id is its call
)

// idleStart is one idle poll on its way through a batch.
type idleStart struct {
	conn    *C.wool_connection
	timeout C.double
	tag     uint64
	state   startState
	id      C.uint64_t
}

// batchBuffers are the leader's arrays in C memory (the library reads and writes them during
// the crossing), made on first use and kept: only the leader uses them, one at a time.
var batchBuffers struct {
	entries  *[batchMost]C.wool_idle_start_entry
	calls    *[batchMost]C.uint64_t
	statuses *[batchMost]C.wool_status
}

// batchIdle registers w and queues an idle poll on c with timeout for the next batch; the
// poll's completion will be sent to w. The goroutine that finds no crossing in progress starts
// the batches itself before returning. The error is register's.
func (c *Connection) batchIdle(timeout C.double, w waiter) (*idleStart, error) {
	completions.mu.Lock()
	queue, tag, err := registerLocked("idle", c.target, w)
	if err != nil {
		completions.mu.Unlock()
		return nil, err
	}
	s := &idleStart{conn: c.handle.ptr, timeout: timeout, tag: tag}
	completions.pending = append(completions.pending, s)
	if completions.leading {
		completions.mu.Unlock()
		return s, nil
	}
	completions.leading = true
	lead(queue) // unlocks
	return s, nil
}

// lead starts batches of the pending polls until none is left, then gives up the lead. Called
// with completions.mu held and completions.leading set; returns with the lock released.
func lead(queue *C.wool_queue) {
	for len(completions.pending) > 0 {
		batch := completions.pending
		completions.pending = completions.spare[:0]
		live := batch[:0] // the polls to start: the batch less the withdrawn ones, in place
		for _, s := range batch {
			if s.state == startPending {
				s.state = startCrossing
				live = append(live, s)
			}
		}
		completions.mu.Unlock()
		var cancels []C.uint64_t
		for first := 0; first < len(live); first += batchMost {
			part := live[first:min(first+batchMost, len(live))]
			failed := cross(queue, part)
			completions.mu.Lock()
			completions.crossings++
			completions.batched += uint64(len(part))
			for _, s := range part {
				if failed != nil {
					// The whole crossing was refused (a library bug: its arguments are good).
					if w, ok := completions.waiters[s.tag]; ok {
						delete(completions.waiters, s.tag)
						w.done <- *failed
					}
				} else if s.state == startCancelled {
					cancels = append(cancels, s.id)
				}
				s.state = startStarted
			}
			completions.mu.Unlock()
		}
		for _, id := range cancels {
			startedCall{queue: queue, id: id}.cancel()
		}
		clear(batch[:cap(batch)]) // drop the references to finished starts
		completions.mu.Lock()
		completions.spare = batch[:0]
	}
	completions.leading = false
	completions.mu.Unlock()
}

// cross starts part (at most batchMost polls) in one wool_idle_start_batch and writes each
// poll's call id; nil, or the completion to deliver to every poll of part when the library
// refused the whole batch.
func cross(queue *C.wool_queue, part []*idleStart) *outcome {
	if batchBuffers.entries == nil {
		batchBuffers.entries = (*[batchMost]C.wool_idle_start_entry)(C.calloc(batchMost, C.sizeof_wool_idle_start_entry))
		batchBuffers.calls = (*[batchMost]C.uint64_t)(C.calloc(batchMost, C.sizeof_uint64_t))
		batchBuffers.statuses = (*[batchMost]C.wool_status)(C.calloc(batchMost, C.sizeof_wool_status))
	}
	entries, calls := batchBuffers.entries, batchBuffers.calls
	for i, s := range part {
		entries[i] = C.wool_idle_start_entry{conn: s.conn, timeout_seconds: s.timeout, tag: C.uint64_t(s.tag)}
	}
	err := call("idle", "", func() C.wool_status {
		return C.wool_idle_start_batch(queue, &entries[0], C.size_t(len(part)), &calls[0], &batchBuffers.statuses[0])
	})
	if err != nil {
		e := err.(*Error)
		return &outcome{status: e.Status, code: e.Code, message: "starting idle polls: " + e.Message}
	}
	for i, s := range part {
		s.id = calls[i]
	}
	return nil
}

// cancel cancels the poll: one still pending is withdrawn (its waiter gets
// StatusCancelled at once), one in a crossing is cancelled by the leader once the crossing
// returns, a started one here. Either way its completion reaches its waiter without delay.
func (s *idleStart) cancel() {
	completions.mu.Lock()
	queue := completions.queue
	switch s.state {
	case startPending:
		s.state = startWithdrawn
		if w, ok := completions.waiters[s.tag]; ok {
			delete(completions.waiters, s.tag)
			w.done <- outcome{status: StatusCancelled, code: codeNone, message: "cancelled before it started"}
		}
	case startCrossing:
		s.state = startCancelled
	case startStarted:
		id := s.id
		completions.mu.Unlock()
		startedCall{queue: queue, id: id}.cancel()
		return
	}
	completions.mu.Unlock()
}
