package wool

// #include <stdlib.h>
// #include "wool.h"
import "C"

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"unicode"
	"unsafe"
)

// Status is the outcome of a libwool call (the C enum wool_status). Its String method gives
// the C name, e.g. "WOOL_STATUS_TRANSIENT".
type Status int32

// The statuses of wool.h, with the same values.
const (
	StatusOK              Status = 0 // the call succeeded
	StatusInvalidArgument Status = 1 // the caller's mistake (ErrInvalidArgument)
	StatusIdleUnavailable Status = 2 // the worker predates the idle RPC (ErrIdleUnavailable)
	StatusTransient       Status = 3 // unreachable, shutting down, deadline passed (ErrTransient)
	StatusHandshake       Status = 4 // a TLS failure (ErrHandshake)
	StatusRPCError        Status = 5 // any other gRPC failure (ErrRPC)
	StatusPanic           Status = 6 // a library bug caught at the boundary (ErrPanic)
	StatusCancelled       Status = 7 // a call cancelled because its context ended (see Error.Is)
)

// The values above are the header's: an index out of range here fails the build if they drift.
var (
	_ = [1]int{}[StatusOK-C.WOOL_STATUS_OK]
	_ = [1]int{}[StatusInvalidArgument-C.WOOL_STATUS_INVALID_ARGUMENT]
	_ = [1]int{}[StatusIdleUnavailable-C.WOOL_STATUS_IDLE_UNAVAILABLE]
	_ = [1]int{}[StatusTransient-C.WOOL_STATUS_TRANSIENT]
	_ = [1]int{}[StatusHandshake-C.WOOL_STATUS_HANDSHAKE]
	_ = [1]int{}[StatusRPCError-C.WOOL_STATUS_RPC_ERROR]
	_ = [1]int{}[StatusPanic-C.WOOL_STATUS_PANIC]
	_ = [1]int{}[StatusCancelled-C.WOOL_STATUS_CANCELLED]
)

const (
	codeNone             = -1 // Error.Code when no gRPC status was involved
	codeDeadlineExceeded = 4  // gRPC DEADLINE_EXCEEDED
)

// String returns the status's C name; a value that is no status gives "WOOL_STATUS_UNKNOWN".
func (s Status) String() string {
	return C.GoString(C.wool_status_name(C.wool_status(s)))
}

// The error kinds, for errors.Is. Each *Error matches exactly one of them, chosen by its
// Status; the kind says what a caller polling a pool of workers should do.
var (
	// ErrInvalidArgument: the caller's mistake, found before any I/O (a bad target, bad PEM,
	// an unreadable file, text containing a NUL byte). Fix the call; retrying cannot help.
	ErrInvalidArgument = errors.New("wool: invalid argument")
	// ErrIdleUnavailable: the worker predates the idle RPC (gRPC UNIMPLEMENTED). Not a health
	// fault: the worker works, it just cannot say how idle it is.
	ErrIdleUnavailable = errors.New("wool: idle reporting unavailable")
	// ErrTransient: the worker could not be reached in time or is shutting down (gRPC
	// UNAVAILABLE, DEADLINE_EXCEEDED, including the context's deadline, or
	// RESOURCE_EXHAUSTED). Skip the worker this time, keep it.
	ErrTransient = errors.New("wool: transient failure")
	// ErrHandshake: a TLS, mutual-TLS or identity failure seen by this client.
	ErrHandshake = errors.New("wool: TLS handshake failed")
	// ErrRPC: any other gRPC failure. In Wool's pool policy, evict the worker.
	ErrRPC = errors.New("wool: RPC failed")
	// ErrPanic: a bug inside libwool, caught at the C boundary. Please report it.
	ErrPanic = errors.New("wool: library bug (panic caught)")
	// ErrClosed: the Connection or Credentials was already closed. Not an *Error: it is this
	// package's own, not the library's.
	ErrClosed = errors.New("wool: use of closed handle")
)

var kinds = map[Status]error{
	StatusInvalidArgument: ErrInvalidArgument,
	StatusIdleUnavailable: ErrIdleUnavailable,
	StatusTransient:       ErrTransient,
	StatusHandshake:       ErrHandshake,
	StatusRPCError:        ErrRPC,
	StatusPanic:           ErrPanic,
	// Idle and Stop report a call cancelled because its context ended as the context's error;
	// an *Error with StatusCancelled (a cancellation without one, never expected) still
	// matches context.Canceled, not a worker-fault kind.
	StatusCancelled: context.Canceled,
}

// Error is a failure reported by libwool (or, for an expired context deadline, one of the
// same kind). Match its kind with errors.Is(err, ErrTransient) and so on; use errors.As to
// read the details.
type Error struct {
	// Op is the operation: "connect", "idle", "stop", "credentials", or for the fleet calls
	// "discover", "watch", "watch next" and "retire".
	Op string
	// Target is the worker's target as given to Connect (a discovered worker's address for
	// ConnectWorker); empty for credentials, discovery, watches and a retire round's own
	// failure.
	Target string
	// Status is the library's status; Status.String() gives its C name.
	Status Status
	// Code is the gRPC status code (0..16) of the failure, or -1 when none was involved
	// (an invalid argument, a caught panic).
	Code int
	// Message is the library's description of the failure (wool_last_error).
	Message string
	// cause is the context error behind a deadline failure, so that
	// errors.Is(err, context.DeadlineExceeded) holds too.
	cause error
}

// Error formats the failure as "wool: OP TARGET: STATUS (gRPC code N): MESSAGE".
func (e *Error) Error() string {
	where := e.Op
	if e.Target != "" {
		where += " " + printable(e.Target)
	}
	code := ""
	if e.Code != codeNone {
		code = fmt.Sprintf(" (gRPC code %d)", e.Code)
	}
	return fmt.Sprintf("wool: %s: %s%s: %s", where, e.Status, code, e.Message)
}

// Is reports whether target is the error kind of e's Status (ErrTransient and so on;
// context.Canceled for StatusCancelled).
func (e *Error) Is(target error) bool {
	kind, ok := kinds[e.Status]
	return ok && target == kind
}

// Unwrap returns the context error behind a deadline failure, or nil.
func (e *Error) Unwrap() error { return e.cause }

// call makes one C call that returns a wool_status and, when it fails, reads the failure's
// details. The library keeps them per OS thread (like errno), and a goroutine may move to
// another thread between two cgo calls, so the thread is pinned for both.
func call(op, target string, f func() C.wool_status) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	status := Status(f())
	if status == StatusOK {
		return nil
	}
	return &Error{Op: op, Target: target, Status: status, Code: lastRPCCode(), Message: lastErrorMessage()}
}

// lastErrorMessage returns the calling thread's last error message (call with the thread
// locked, right after the failing call).
func lastErrorMessage() string {
	size := C.wool_last_error(nil, 0)
	if size == 0 {
		return ""
	}
	buf := (*C.char)(C.malloc(size + 1))
	defer C.free(unsafe.Pointer(buf))
	C.wool_last_error(buf, size+1)
	return C.GoString(buf)
}

func lastRPCCode() int { return int(C.wool_last_rpc_code()) }

// contextError is the error for a call that ended because ctx did: a passed deadline is a
// transient failure (as when the library's own deadline passes) that also matches
// context.DeadlineExceeded; a cancellation is the caller's choice, not a worker fault, and
// matches context.Canceled only.
func contextError(op, target string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return &Error{
			Op: op, Target: target, Status: StatusTransient, Code: codeDeadlineExceeded,
			Message: "the context's deadline passed before the worker answered", cause: err,
		}
	}
	return opError(op, target, err)
}

// opError wraps an error of this package's own (ErrClosed, a context's error) with the
// operation and target, keeping it matchable with errors.Is.
func opError(op, target string, err error) error {
	if target != "" {
		op += " " + printable(target)
	}
	return fmt.Errorf("wool: %s: %w", op, err)
}

// printable returns text as is, or quoted when it holds characters that would garble a
// message (a NUL byte in a rejected target, say).
func printable(text string) string {
	if strings.IndexFunc(text, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return strconv.Quote(text)
	}
	return text
}

// invalidArgument is an ErrInvalidArgument found on the Go side, before calling the library.
func invalidArgument(op, target, message string) error {
	return &Error{Op: op, Target: target, Status: StatusInvalidArgument, Code: codeNone, Message: message}
}
