package wool

import (
	"context"
	"time"
)

// IdleResult is one Connection's outcome in IdleMany: the reading as Idle returns it, or the
// error Idle would have returned.
type IdleResult struct {
	Idle time.Duration
	Err  error
}

// IdleMany polls the workers behind conns (as Idle), keeping at most maxInFlight polls in
// flight at once (at least 1: 0 or less gives ErrInvalidArgument in every slot, as C's
// wool_idle_many and Python's idle_many refuse 0), all within ctx, and returns one result per
// Connection, in conns' order. It returns once every poll has finished; the calling goroutine
// does all the work (no goroutine per poll, no OS thread held while waiting).
//
// The same Connection may appear several times. A nil Connection gives ErrInvalidArgument in
// its slot, a closed one ErrClosed. When ctx ends, the polls in flight are cancelled (as for
// Idle) and those not yet started are not started; all of them then get the context's error:
// context.Canceled, or for a passed deadline an ErrTransient that also matches
// context.DeadlineExceeded (as the C library's wool_idle_many reports polls not started
// before its deadline).
func IdleMany(ctx context.Context, conns []*Connection, maxInFlight int) []IdleResult {
	results := make([]IdleResult, len(conns))
	if maxInFlight <= 0 {
		err := invalidArgument("idle_many", "", "maxInFlight must be at least 1")
		for i := range results {
			results[i].Err = err
		}
		return results
	}
	if maxInFlight > len(conns) {
		maxInFlight = len(conns)
	}
	if maxInFlight == 0 {
		return results
	}
	// Room for every completion owed at once: a poll starts only when one was received.
	done := make(chan outcome, maxInFlight)
	inFlight := make(map[int]startedCall, maxInFlight)
	finish := func(o outcome) {
		conn := conns[o.index]
		delete(inFlight, o.index)
		conn.handle.inFlight.Add(-1)
		if err := conn.result(ctx, "idle", o); err != nil {
			results[o.index].Err = err
		} else {
			results[o.index].Idle = durationFromSeconds(o.seconds)
		}
	}
	next := 0
	for {
		for len(inFlight) < maxInFlight && next < len(conns) && ctx.Err() == nil {
			i := next
			next++
			conn := conns[i]
			if conn == nil {
				results[i].Err = invalidArgument("idle", "", "a nil *Connection")
				continue
			}
			timeout, ok := timeoutSeconds(ctx)
			if !ok {
				results[i].Err = contextError("idle", conn.target, context.DeadlineExceeded)
				continue
			}
			started, err := conn.start(ctx, "idle", timeout, waiter{done: done, index: i}, startIdle)
			if err != nil {
				results[i].Err = err
				continue
			}
			inFlight[i] = started
		}
		if len(inFlight) == 0 {
			break // every poll started has finished, and no more start
		}
		select {
		case o := <-done:
			finish(o)
		case <-ctx.Done():
			for _, started := range inFlight {
				started.cancel()
			}
			for len(inFlight) > 0 {
				finish(<-done)
			}
		}
	}
	for i := next; i < len(conns); i++ { // not started: ctx ended first
		target := ""
		if conns[i] != nil {
			target = conns[i].target
		}
		results[i].Err = contextError("idle", target, ctx.Err())
	}
	return results
}
