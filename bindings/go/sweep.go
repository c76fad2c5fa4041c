package wool

// #include <stdlib.h>
// #include "wool.h"
import "C"

import (
	"context"
	"errors"
	"runtime"
	"time"
	"unsafe"
)

// IdleResult is one Connection's outcome in IdleMany: the reading as Idle returns it, or the
// error Idle would have returned.
type IdleResult struct {
	Idle time.Duration
	Err  error
}

// IdleMany polls the workers behind conns (as Idle), keeping at most maxInFlight polls in
// flight at once (at least 1: the library refuses less, and its ErrInvalidArgument is then in
// every slot), all within ctx, and returns one result per
// Connection, in conns' order. It is one sweep of the library (wool_idle_many_start) on the
// process's completion queue: the calling goroutine waits for the sweep's one completion and
// holds no OS thread meanwhile.
//
// The same Connection may appear several times. A nil Connection gives ErrInvalidArgument in
// its slot, one closed before the sweep starts ErrClosed (one closed later is polled). A worker's failure is an *Error with the library's
// message for that worker. ctx's deadline is the sweep's: the polls still in flight when it
// passes, and those not started by then, get an ErrTransient that also matches
// context.DeadlineExceeded, the others keep their outcome. When ctx is cancelled, the sweep is
// cancelled (the polls in flight are cancelled as for Idle, those not yet started are not
// started) and every slot but the nil and closed ones gets context.Canceled.
func IdleMany(ctx context.Context, conns []*Connection, maxInFlight int) []IdleResult {
	results := make([]IdleResult, len(conns))
	if len(conns) == 0 {
		return results
	}
	// Slots known before the sweep: nil Connections (NULL handles to the library).
	known := make([]error, len(conns))
	failAll := func(fail func(target string) error) []IdleResult {
		for i, conn := range conns {
			switch {
			case known[i] != nil:
				results[i].Err = known[i]
			case conn != nil:
				results[i].Err = fail(conn.target)
			}
		}
		return results
	}
	for i, conn := range conns {
		if conn == nil {
			known[i] = invalidArgument("idle", "", "a nil *Connection")
		}
	}
	if err := ctx.Err(); err != nil {
		return failAll(func(target string) error { return contextError("idle", target, err) })
	}
	timeout, ok := timeoutSeconds(ctx)
	if !ok {
		return failAll(func(target string) error { return contextError("idle", target, context.DeadlineExceeded) })
	}

	// The handles and the results live in C memory: the library keeps the results' address
	// after wool_idle_many_start returns, which cgo forbids for Go memory. The results are
	// freed only once the sweep's completion has been received: after it, the library never
	// writes them again.
	count := C.size_t(len(conns))
	handles := (**C.wool_connection)(C.calloc(count, C.size_t(unsafe.Sizeof((*C.wool_connection)(nil)))))
	out := (*C.wool_poll_result)(C.calloc(count, C.size_t(unsafe.Sizeof(C.wool_poll_result{}))))
	defer C.free(unsafe.Pointer(handles))
	defer C.free(unsafe.Pointer(out))
	if handles == nil || out == nil {
		err := &Error{Op: "idle_many", Status: StatusTransient, Code: codeNone, Message: "out of memory for the sweep's arrays"}
		return failAll(func(string) error { return err })
	}
	done := make(chan outcome, 1)
	started, err := startSweep(ctx, conns, unsafe.Slice(handles, len(conns)), handles, out, timeout, maxInFlight, done)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil { // ended while waiting to start
			return failAll(func(target string) error { return contextError("idle", target, ctxErr) })
		}
		return failAll(func(string) error { return err })
	}
	o := awaitSweep(ctx, done, started)
	runtime.KeepAlive(conns)
	if o.status != StatusOK {
		// Cancelled because ctx ended (the context's error in every slot), or a failure of
		// the sweep as a whole, never expected.
		return failAll(func(target string) error {
			return (&Connection{target: target}).result(ctx, "idle", o)
		})
	}
	for i, r := range unsafe.Slice(out, len(conns)) {
		if known[i] != nil {
			results[i].Err = known[i]
			continue
		}
		slot := outcome{status: Status(r.status), code: int(r.rpc_code), seconds: float64(r.seconds)}
		if slot.status != StatusOK {
			slot.message = C.GoString(&r.message[0])
		}
		if err := conns[i].result(ctx, "idle", slot); err != nil {
			results[i].Err = err
		} else {
			results[i].Idle = durationFromSeconds(slot.seconds)
		}
	}
	return results
}

// sweepDeadlineGrace is how long IdleMany waits, once ctx's deadline has passed, for the
// sweep to complete by itself before cancelling it. The library's deadline for the sweep is
// ctx's (computed a hair later): at it, the polls still in flight fail DEADLINE_EXCEEDED and
// the sweep completes with every other worker's reading, which a cancellation would discard.
const sweepDeadlineGrace = 250 * time.Millisecond

// awaitSweep waits for the sweep's one completion. When ctx is cancelled the sweep is
// cancelled at once; when ctx's deadline passes it is given sweepDeadlineGrace to complete
// first. After a cancel the CANCELLED completion (or the sweep's own, if it came first) is
// awaited too: once it is received the library no longer writes the results.
func awaitSweep(ctx context.Context, done <-chan outcome, started startedCall) outcome {
	select {
	case o := <-done:
		return o
	case <-ctx.Done(): // a nil channel (a context that never ends) never fires
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		grace := time.NewTimer(sweepDeadlineGrace)
		defer grace.Stop()
		select {
		case o := <-done:
			return o
		case <-grace.C:
		}
	}
	started.cancel()
	return <-done
}

// startSweep registers done and starts one sweep (wool_idle_many_start) of conns on the
// process's queue, its results going to out. Each Connection's handle goes to the library as
// it is: one closed before or during the start is refused in its slot (and read as ErrClosed
// by result), one closed later is polled all the same (the library keeps what it needs). A nil
// Connection is NULL. maxInFlight below 0, which size_t cannot hold, goes as 0, which the
// library refuses.
func startSweep(ctx context.Context, conns []*Connection, slots []*C.wool_connection, handles **C.wool_connection, out *C.wool_poll_result, timeout C.double, maxInFlight int, done chan<- outcome) (startedCall, error) {
	select {
	case inLibrary <- struct{}{}:
	case <-ctx.Done():
		return startedCall{}, contextError("idle", "", ctx.Err())
	}
	defer func() { <-inLibrary }()
	on := make([]*connHandle, 0, len(conns))
	for i, conn := range conns {
		if conn != nil {
			slots[i] = conn.handle.ptr
			on = append(on, conn.handle)
		}
	}
	queue, tag, err := register("idle_many", "", waiter{done: done, on: on})
	if err != nil {
		return startedCall{}, err
	}
	var id C.uint64_t
	err = call("idle_many", "", func() C.wool_status {
		return C.wool_idle_many_start(handles, C.size_t(len(conns)), timeout, C.size_t(max(maxInFlight, 0)), queue, C.uint64_t(tag), out, &id)
	})
	if err != nil {
		unregister(tag)
		return startedCall{}, err
	}
	return startedCall{queue: queue, id: id}, nil
}
