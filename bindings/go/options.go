package wool

// #include "wool.h"
import "C"

import (
	"fmt"
	"math"
	"time"
)

// Channel options: the settings of the HTTP/2 channel behind a Connection, as Wool's
// ChannelOptions (wool.h's wool_channel_options). Each one left out keeps Wool's
// default. Connect passes the values to the library as they are, and the library alone decides
// which are valid: a refused value makes Connect fail with an *Error matching
// ErrInvalidArgument whose message names the library's option (e.g. "channel option
// keepalive_timeout must be ..."). Durations go to the library as seconds; those below 1 ms,
// zero and negative ones are refused. Options are applied in the order given, each value
// checked as it is: when an option is given twice the last one wins, but a refused value fails
// Connect even if a later option would have replaced it.
//
// Connections share a pooled channel only when their target, credentials and channel options
// are all equal.

// channelSetting applies one channel option to the library's options object; a refusal comes
// back as an *Error for Connect (op "connect", target).
type channelSetting func(options *C.wool_channel_options, target string) error

// withChannel is an Option adding one channel setting, applied in the order given.
func withChannel(setting channelSetting) Option {
	return func(o *connectOptions) { o.channel = append(o.channel, setting) }
}

// setChannel runs one wool_channel_options_set_* call, reading the library's message when it
// refuses the value.
func setChannel(target string, f func() C.wool_status) error {
	return call("connect", target, f)
}

// seconds converts a duration for the library (which refuses zero, negative and sub-millisecond
// values itself).
func seconds(d time.Duration) C.double { return C.double(d.Seconds()) }

// size converts a count for the library's size_t. A negative int has no size_t value, so it is
// refused here, naming the library's option as the library would; every other value (0 and
// ones too large included) goes to the library to decide.
func size(option string, n int, target string) (C.size_t, error) {
	if n < 0 {
		return 0, invalidArgument("connect", target,
			fmt.Sprintf("channel option %s must not be negative, got %d", option, n))
	}
	return C.size_t(n), nil
}

// WithKeepalive sets HTTP/2 keepalive: a PING goes out interval after the previous one was
// answered, and a PING unanswered for timeout declares the connection dead. Its calls, even
// ones whose context has no deadline, then fail with ErrTransient (gRPC UNAVAILABLE, a
// message saying the worker stopped answering keepalive pings), and the next call dials anew.
// So a worker that froze (SIGSTOP, a hung host, a cut network path) costs a call at most
// about interval+timeout instead of blocking it for ever.
//
// Wool's keepalive_time_ms and keepalive_timeout_ms (the library's keepalive_interval and
// keepalive_timeout); both default to 30 s and must be at least 1 ms.
func WithKeepalive(interval, timeout time.Duration) Option {
	return withChannel(func(options *C.wool_channel_options, target string) error {
		if err := setChannel(target, func() C.wool_status {
			return C.wool_channel_options_set_keepalive_interval(options, seconds(interval))
		}); err != nil {
			return err
		}
		return setChannel(target, func() C.wool_status {
			return C.wool_channel_options_set_keepalive_timeout(options, seconds(timeout))
		})
	})
}

// WithoutKeepalive turns keepalive off (the library's keepalive_interval set to INFINITY).
// Then a call whose context has no deadline to a worker that froze without closing its
// connection blocks for ever: give such calls a deadline.
func WithoutKeepalive() Option {
	return withChannel(func(options *C.wool_channel_options, target string) error {
		return setChannel(target, func() C.wool_status {
			return C.wool_channel_options_set_keepalive_interval(options, C.double(math.Inf(1)))
		})
	})
}

// WithKeepaliveWithoutCalls sets whether keepalive PINGs also go out while no call is open on
// the connection, so that a pooled connection whose worker froze is noticed and dropped
// between polls (Wool's keepalive_permit_without_calls; default true).
func WithKeepaliveWithoutCalls(permit bool) Option {
	return withChannel(func(options *C.wool_channel_options, target string) error {
		return setChannel(target, func() C.wool_status {
			return C.wool_channel_options_set_keepalive_without_calls(options, C.bool(permit))
		})
	})
}

// WithMaxPingsWithoutData sets the most keepalive PINGs sent with no call started in between
// (Wool's max_pings_without_data; default 2); 0 means no limit.
func WithMaxPingsWithoutData(pings uint32) Option {
	return withChannel(func(options *C.wool_channel_options, target string) error {
		return setChannel(target, func() C.wool_status {
			return C.wool_channel_options_set_max_pings_without_data(options, C.uint32_t(pings))
		})
	})
}

// WithMaxReceiveMessageSize sets the largest message received, in bytes (Wool's
// max_receive_message_length, the library's max_receive_message_bytes; default 100 MiB,
// 1 to 4294967295). A larger answer fails its call (with ErrTransient, gRPC
// RESOURCE_EXHAUSTED, by the library's contract).
func WithMaxReceiveMessageSize(bytes int) Option {
	return withChannel(func(options *C.wool_channel_options, target string) error {
		n, err := size("max_receive_message_bytes", bytes, target)
		if err != nil {
			return err
		}
		return setChannel(target, func() C.wool_status {
			return C.wool_channel_options_set_max_receive_message_bytes(options, n)
		})
	})
}

// WithMaxSendMessageSize sets the largest message sent, in bytes (Wool's
// max_send_message_length, the library's max_send_message_bytes; default 100 MiB,
// 1 to 4294967295).
func WithMaxSendMessageSize(bytes int) Option {
	return withChannel(func(options *C.wool_channel_options, target string) error {
		n, err := size("max_send_message_bytes", bytes, target)
		if err != nil {
			return err
		}
		return setChannel(target, func() C.wool_status {
			return C.wool_channel_options_set_max_send_message_bytes(options, n)
		})
	})
}

// WithMaxConcurrentStreams sets the most calls opening streams on the channel at once (Wool's
// max_concurrent_streams; default 100, 1 to 2147483647). Further calls wait their turn
// rather than fail.
func WithMaxConcurrentStreams(streams int) Option {
	return withChannel(func(options *C.wool_channel_options, target string) error {
		n, err := size("max_concurrent_streams", streams, target)
		if err != nil {
			return err
		}
		return setChannel(target, func() C.wool_status {
			return C.wool_channel_options_set_max_concurrent_streams(options, n)
		})
	})
}

// WithConnectTimeout bounds establishing a connection: the TCP, TLS and HTTP/2 handshakes,
// up to the worker's first HTTP/2 SETTINGS (the library's connect_timeout; default 20 s, at
// least 1 ms). A call's context deadline bounds it too, whichever ends first; a worker not
// reached in time fails the call with ErrTransient (code 14), also one that accepts the
// connection and never speaks HTTP/2.
func WithConnectTimeout(timeout time.Duration) Option {
	return withChannel(func(options *C.wool_channel_options, target string) error {
		return setChannel(target, func() C.wool_status {
			return C.wool_channel_options_set_connect_timeout(options, seconds(timeout))
		})
	})
}

// WithoutConnectTimeout removes the connect timeout (the library's connect_timeout set to
// INFINITY): only a call's context deadline bounds establishing its connection.
func WithoutConnectTimeout() Option {
	return withChannel(func(options *C.wool_channel_options, target string) error {
		return setChannel(target, func() C.wool_status {
			return C.wool_channel_options_set_connect_timeout(options, C.double(math.Inf(1)))
		})
	})
}
