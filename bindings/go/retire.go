package wool

// #include <stdint.h>
// #include <stdlib.h>
// #include "wool.h"
import "C"

import (
	"fmt"
	"runtime"
	"time"
	"unsafe"
)

// NoStopTimeout as RetirePolicy.StopTimeout gives each stop no deadline (the library's
// INFINITY), as a GraceForever grace needs. Any negative StopTimeout means the same.
const NoStopTimeout time.Duration = -1

// RetirePolicy says when RetireIdle retires a worker, and how (the library's
// wool_retire_policy, the Rust RetirePolicy). Make one with NewRetirePolicy for the library's
// defaults. The library checks every field; a refused one makes RetireIdle fail with
// ErrInvalidArgument, its message naming the field.
type RetirePolicy struct {
	// IdleThreshold: retire a worker idle at least this long (>= 0).
	IdleThreshold time.Duration
	// Grace: each stop's grace, as for Connection.Stop: 0 cancels in-flight work at once,
	// positive lets it run that long, GraceForever (any negative) however long it takes.
	// Positive, a task that reached the worker between the poll and the stop finishes.
	Grace time.Duration
	// StopTimeout: each stop's deadline; it must exceed a bounded Grace, and be
	// NoStopTimeout (any negative) for GraceForever. 0 is refused by the library.
	StopTimeout time.Duration
	// KeepMin: never leave fewer than this many of the workers that answered the poll
	// running (>= 0).
	KeepMin int
	// MaxStops: the most stops in one round; 0 means no limit (the library's SIZE_MAX);
	// negative is refused.
	MaxStops int
	// DryRun: decide, but stop nothing.
	DryRun bool
}

// NewRetirePolicy returns the library's default policy for idleThreshold (as the Rust
// RetirePolicy::new): a 30 s grace, a 60 s stop timeout, KeepMin 0, no limit on stops, not a
// dry run.
func NewRetirePolicy(idleThreshold time.Duration) RetirePolicy {
	return RetirePolicy{
		IdleThreshold: idleThreshold,
		Grace:         30 * time.Second,
		StopTimeout:   60 * time.Second,
	}
}

// toC converts the policy; only what C cannot hold (negative counts) is refused here.
func (p RetirePolicy) toC() (C.wool_retire_policy, error) {
	if p.KeepMin < 0 {
		return C.wool_retire_policy{}, invalidArgument("retire", "", fmt.Sprintf("policy KeepMin must not be negative, got %d", p.KeepMin))
	}
	if p.MaxStops < 0 {
		return C.wool_retire_policy{}, invalidArgument("retire", "", fmt.Sprintf("policy MaxStops must not be negative (0 = no limit), got %d", p.MaxStops))
	}
	c := C.wool_retire_policy{
		idle_threshold: C.double(p.IdleThreshold.Seconds()),
		grace:          C.double(-1),
		stop_timeout:   infinity,
		keep_min:       C.size_t(p.KeepMin),
		max_stops:      C.SIZE_MAX,
		dry_run:        C.bool(p.DryRun),
	}
	if p.Grace >= 0 {
		c.grace = C.double(p.Grace.Seconds())
	}
	if p.StopTimeout >= 0 {
		c.stop_timeout = C.double(p.StopTimeout.Seconds())
	}
	if p.MaxStops > 0 {
		c.max_stops = C.size_t(p.MaxStops)
	}
	return c, nil
}

// RetireReason says why RetireIdle retired or kept a worker (WOOL_RETIRE_REASON_*).
type RetireReason int

const (
	ReasonIdle            RetireReason = 0 // retired: idle at least the threshold
	ReasonBusy            RetireReason = 1 // kept: work in flight (idle read exactly 0)
	ReasonBelowThreshold  RetireReason = 2 // kept: idle for less than the threshold
	ReasonMinimum         RetireReason = 3 // kept: retiring it would leave fewer than KeepMin
	ReasonRoundLimit      RetireReason = 4 // kept: MaxStops reached
	ReasonIdleUnavailable RetireReason = 5 // kept: the worker predates the idle RPC
	ReasonUnreachable     RetireReason = 6 // kept: unreachable or refused the handshake
	ReasonPollFailed      RetireReason = 7 // kept: the poll failed otherwise
)

var (
	_ = [1]int{}[ReasonIdle-C.WOOL_RETIRE_REASON_IDLE]
	_ = [1]int{}[ReasonBusy-C.WOOL_RETIRE_REASON_BUSY]
	_ = [1]int{}[ReasonBelowThreshold-C.WOOL_RETIRE_REASON_BELOW_THRESHOLD]
	_ = [1]int{}[ReasonMinimum-C.WOOL_RETIRE_REASON_MINIMUM]
	_ = [1]int{}[ReasonRoundLimit-C.WOOL_RETIRE_REASON_ROUND_LIMIT]
	_ = [1]int{}[ReasonIdleUnavailable-C.WOOL_RETIRE_REASON_IDLE_UNAVAILABLE]
	_ = [1]int{}[ReasonUnreachable-C.WOOL_RETIRE_REASON_UNREACHABLE]
	_ = [1]int{}[ReasonPollFailed-C.WOOL_RETIRE_REASON_POLL_FAILED]
)

// String returns the library's name of the reason (wool_retire_reason_name): "idle", "busy",
// "below-threshold", "minimum", "round-limit", "idle-unavailable", "unreachable",
// "poll-failed"; "unknown" for another value.
func (r RetireReason) String() string {
	return C.GoString(C.wool_retire_reason_name(C.int(r)))
}

// RetireDecision is what RetireIdle decided for one worker and how its stop went (the
// library's wool_retire_decision).
type RetireDecision struct {
	// Reason says why it was retired or kept.
	Reason RetireReason
	// Retire reports whether the policy retires it (Reason is ReasonIdle).
	Retire bool
	// Idle is the poll's reading when IdleErr is nil.
	Idle time.Duration
	// IdleErr is the poll's error, as Idle would have returned it (an *Error of the
	// library's status and gRPC code; ErrClosed, wrapped, for a closed Connection), or nil.
	IdleErr error
	// Stopped reports whether a stop was made (false when kept, or in a dry run).
	Stopped bool
	// StopErr is the stop's error, as Stop would have returned it, or nil (also when no stop
	// was made).
	StopErr error
}

// slotError is a poll's or stop's failure in a decision. The C decision carries the status
// and gRPC code but no message, so the message says where the failure came from.
func slotError(op, target string, status C.wool_status, code C.int32_t, message string) error {
	if Status(status) == StatusOK {
		return nil
	}
	return &Error{Op: op, Target: target, Status: Status(status), Code: int(code), Message: message}
}

// RetireIdle runs one retire round over conns, as wool_retire_idle: it polls every worker
// (as IdleMany, all within pollTimeout, at most maxInFlight at once), decides by policy (the
// most idle retired first, never leaving fewer than policy.KeepMin of the workers that
// answered, at most policy.MaxStops), stops the retired ones (as Stop with the policy's grace
// and stop timeout, at most maxInFlight at once) unless policy.DryRun, and returns one
// decision per Connection, in conns' order. Every decision is the library's; this function
// only converts.
//
// pollTimeout must be positive and maxInFlight at least 1 (the library refuses less). A nil
// Connection is kept with ReasonPollFailed and an IdleErr matching ErrInvalidArgument; one
// closed before the round starts is kept with ReasonPollFailed and ErrClosed. The Connections
// stay usable during the round; one closed meanwhile is polled and stopped all the same (the
// library keeps what it needs). Blocks the calling goroutine and its OS thread until every
// stop has answered (after its worker's drain).
//
// Errors (nothing is polled or stopped then): an *Error (Op "retire") matching
// ErrInvalidArgument for a refused policy field (its message names it), a bad pollTimeout or a
// maxInFlight below 1.
// Workers' failures are in the decisions, never here.
func RetireIdle(conns []*Connection, policy RetirePolicy, pollTimeout time.Duration, maxInFlight int) ([]RetireDecision, error) {
	cPolicy, err := policy.toC()
	if err != nil {
		return nil, err
	}
	// Below 0, which size_t cannot hold, goes as 0, which the library refuses.
	maxInFlight = max(maxInFlight, 0)
	if maxInFlight > len(conns) {
		maxInFlight = max(len(conns), 1)
	}
	count := len(conns)
	// The array of handles lives in C memory: Go memory passed to C may not hold pointers to
	// Go memory, and the handles are C pointers anyway.
	var handles **C.wool_connection
	var out *C.wool_retire_decision
	if count > 0 {
		handles = (**C.wool_connection)(C.calloc(C.size_t(count), C.size_t(unsafe.Sizeof((*C.wool_connection)(nil)))))
		defer C.free(unsafe.Pointer(handles))
		out = (*C.wool_retire_decision)(C.calloc(C.size_t(count), C.size_t(unsafe.Sizeof(C.wool_retire_decision{}))))
		defer C.free(unsafe.Pointer(out))
	}
	slots := unsafe.Slice(handles, count)
	for i, conn := range conns {
		if conn != nil { // nil stays NULL: the library keeps it with an invalid-argument poll
			slots[i] = conn.handle.ptr
		}
	}
	err = call("retire", "", func() C.wool_status {
		return C.wool_retire_idle(handles, C.size_t(count), &cPolicy, C.double(pollTimeout.Seconds()), C.size_t(maxInFlight), out)
	})
	runtime.KeepAlive(conns)
	if err != nil {
		return nil, err
	}
	decisions := make([]RetireDecision, count)
	for i, d := range unsafe.Slice(out, count) {
		target := ""
		if conns[i] != nil {
			target = conns[i].target
		}
		message := C.GoString(&d.message[0])
		decision := RetireDecision{
			Reason:  RetireReason(d.reason),
			Retire:  bool(d.retire),
			IdleErr: slotError("idle", target, d.poll_status, d.poll_rpc_code, message),
			Stopped: bool(d.stopped),
			StopErr: slotError("stop", target, d.stop_status, d.stop_rpc_code, message),
		}
		switch {
		case conns[i] == nil:
			decision.IdleErr = invalidArgument("idle", "", "a nil *Connection")
		case closedIfFreed(decision.IdleErr, &conns[i].handle.freed) == ErrClosed:
			decision.IdleErr = opError("idle", target, ErrClosed)
		case decision.IdleErr == nil:
			decision.Idle = durationFromSeconds(float64(d.idle_seconds))
		}
		decisions[i] = decision
	}
	return decisions, nil
}
