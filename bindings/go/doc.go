// Package wool polls and retires workers of the Wool distributed runtime: it asks a worker how
// long it has been idle and tells it to stop. It is a thin cgo binding over libwool's C API
// (wool.h); the protocol, the connection pool and the error classification all live in the
// Rust library, once.
//
//	conn, err := wool.Connect("127.0.0.1:50051")
//	if err != nil { ... }
//	defer conn.Close()
//	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
//	defer cancel()
//	idle, err := conn.Idle(ctx)
//	switch {
//	case errors.Is(err, wool.ErrIdleUnavailable): // an older worker: cannot tell, leave it
//	case errors.Is(err, wool.ErrTransient):       // unreachable or too slow: skip it this round
//	case err != nil:                              // anything else: evict it
//	case idle >= 5*time.Minute:
//		err = conn.Stop(ctx, 0) // retire it, cancelling nothing (it is idle)
//	}
//
// # Channel options
//
// Connect takes functional options. WithCredentials selects TLS; the others set the HTTP/2
// channel, mirroring Wool's ChannelOptions (and the library's wool_channel_options). Each left
// out keeps Wool's default:
//
//	WithKeepalive(interval, timeout)  keepalive_time_ms / keepalive_timeout_ms    30 s / 30 s
//	WithoutKeepalive()                keepalive off
//	WithKeepaliveWithoutCalls(bool)   keepalive_permit_without_calls              true
//	WithMaxPingsWithoutData(uint32)   max_pings_without_data (0 = no limit)       2
//	WithMaxReceiveMessageSize(bytes)  max_receive_message_length                  100 MiB
//	WithMaxSendMessageSize(bytes)     max_send_message_length                     100 MiB
//	WithMaxConcurrentStreams(n)       max_concurrent_streams                      100
//	WithConnectTimeout(d)             TCP, TLS, HTTP/2 to the peer's SETTINGS     20 s
//	WithoutConnectTimeout()           only the call's deadline bounds connecting
//
// Keepalive is what bounds a call whose context has no deadline: a worker that freezes
// (SIGSTOP, a hung host, a cut network path) without closing its connection stops answering
// PINGs, and interval+timeout later its calls fail with ErrTransient, a message saying it
// stopped answering keepalive pings; the next call dials a fresh connection. With
// WithoutKeepalive such a call blocks for ever, so give it a deadline.
//
//	conn, err := wool.Connect(address,
//		wool.WithKeepalive(5*time.Second, 5*time.Second), wool.WithConnectTimeout(2*time.Second))
//
// The library alone decides which values are valid (durations of at least 1 ms, sizes from 1
// to 4294967295, streams from 1 to 2147483647): Connect returns an *Error matching
// ErrInvalidArgument whose message names the refused option. Connections share a pooled
// channel only when their target, credentials and channel options are all equal.
//
// # Installing
//
// The package is a cgo binding (a C compiler and CGO_ENABLED=1 are needed). Its released
// module carries libwool prebuilt for linux/amd64 and linux/arm64 (static, stripped, for a
// glibc of 2.17 or newer) and its header, so in your module
//
//	go get github.com/libwool/libwool/bindings/go
//	go build ./...
//
// needs no libwool installed, no pkg-config and no Rust: the default build links
// lib/linux_<arch>/libwool.a from the module's own directory (link_prebuilt_linux_*.go), and
// the binary needs no libwool.so at run time. Import it as
//
//	import wool "github.com/libwool/libwool/bindings/go"
//
// Its versions are libwool's: v0.5.0 is tagged bindings/go/v0.5.0 (a nested module: its
// directory is the tag's prefix). Cross-compiling to linux/arm64 takes a C cross compiler, e.g. Zig's:
//
//	CGO_ENABLED=1 GOARCH=arm64 CC="zig cc -target aarch64-linux-gnu.2.17" go build ./...
//
// Other platforms have no prebuilt library: there the default build stops at compile time
// with an error naming the supported platforms (undefined:
// libwool_prebuilt_only_for_linux_amd64_and_linux_arm64...); build with a libwool you
// install, as below.
//
// # Linking an installed libwool
//
// The build tag woolpkgconfig links the libwool that pkg-config finds as "wool" instead (wool.pc,
// wool.h, libwool.so and libwool.a; from the release's C archive, or from a clone of the
// repository with scripts/install.sh $PREFIX, which needs Rust and cargo-c). A checkout of the
// repository holds no prebuilt library, so the repository's own builds and tests use this tag.
//
//	export PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig   # unless pkg-config already looks there
//	go build -tags woolpkgconfig ./...
//
// It links libwool.so dynamically (`#cgo pkg-config: wool`), so the binary needs it at run
// time: install into a directory the dynamic loader searches (then run ldconfig), or set
// LD_LIBRARY_PATH=$PREFIX/lib, or record the directory in the binary:
//
//	CGO_LDFLAGS="-Wl,-rpath,$PREFIX/lib" go build -tags woolpkgconfig ./...
//
// The build tag woolstatic links the installed libwool.a into the binary instead, with the
// system libraries `pkg-config --static wool` lists; the binary then needs no libwool.so:
//
//	go build -tags woolstatic ./...
//
// The go command's build cache does not track an installed libwool.a, so after reinstalling
// libwool rebuild static binaries with -a; the dynamic build always loads the current
// libwool.so.
//
// # Concurrency and lifetime
//
// Connections and credentials are safe for concurrent use. Each wraps one C handle; Close
// releases it. A cleanup (runtime.AddCleanup) releases a forgotten handle as a safety net,
// but only when the garbage collector gets to it, which may be never for a small program: a
// handle holds a share of a pooled HTTP/2 channel (a socket and buffers the collector cannot
// see), so call Close. Closing a Connection with calls in flight is allowed, from any goroutine:
// they complete as they would have, and later calls fail with ErrClosed. The library owns the
// handles' lifetimes (docs/C-API.md, "Handles": a freed handle is refused, never read), so the
// binding keeps no lock or count around them, only whether it has closed each.
//
// The library keeps a failure's message and gRPC code per OS thread (wool_last_error, like
// errno), so the one helper that makes a C call and reads its failure (call, in errors.go) pins
// the goroutine to its thread for those two cgo calls; nothing else does. The started calls
// need no pinning at all: their failures come back in their completions, message and code
// included. A blocking call returning its message through an out-parameter would make that pin
// unnecessary too; the C ABI has no such variant today, and it would be one new function per
// fallible call.
//
// Idle and Stop do not block an OS thread while they wait. Each starts its call on the
// library's completion queue (wool_idle_start_batch, wool_stop_start) and waits on a channel.
// Idle polls that goroutines start at the same time share one cgo crossing: a goroutine that
// finds no crossing under way starts the polls queued meanwhile, all in one
// wool_idle_start_batch, and a lone poll crosses at once (no waiting for a batch to fill). One
// dispatcher goroutine per process collects every completion (it waits in the library's
// wool_queue_next, so the process has one OS thread parked there, made with the first call)
// and hands each to its caller. So any number of goroutines may poll at once, 10,000 on one
// Connection included, on a handful of OS threads; beyond the channel's concurrent streams
// (WithMaxConcurrentStreams, 100 by default) calls wait their turn inside the library. When a
// call's context ends first, the call is cancelled in the library (its HTTP/2 stream is reset,
// so the worker sees the cancellation) before Idle or Stop returns: nothing outlives the Go
// call. A worker that sees many streams reset at once may take it as abuse and close the
// connection (h2's "too_many_resets"): calls then in flight fail with ErrTransient, and the
// next call dials anew. IdleMany polls many Connections as one sweep of the library
// (wool_idle_many_start: a bounded number at a time, one deadline), waiting like Idle for the
// sweep's one completion.
//
// # Fleets
//
// Discover lists the workers a Wool pool publishes under a namespace (LocalDiscovery: the
// shared-memory registry on this host; LanDiscovery: DNS-SD), WatchPool follows them joining
// and leaving, ConnectWorker reaches one (over TLS when it advertises it), IdleMany polls
// many at once, and RetireIdle runs one retire round by a RetirePolicy (NewRetirePolicy gives
// the library's defaults). Every decision is the library's (wool_discover, wool_watch_*,
// wool_connect_worker, wool_idle_many_start, wool_retire_idle); the package only converts.
//
//	workers, err := wool.Discover("batch", wool.LocalDiscovery, 0)
//	conns := make([]*wool.Connection, len(workers))
//	for i, w := range workers {
//		if conns[i], err = wool.ConnectWorker(w, nil); err != nil { ... }
//	}
//	decisions, err := wool.RetireIdle(conns, wool.NewRetirePolicy(5*time.Minute), 5*time.Second, 100)
//
// # Errors
//
// Failures reported by the library are *Error values carrying the library's status, the gRPC
// status code and message. Compare them with errors.Is against ErrIdleUnavailable,
// ErrTransient, ErrHandshake, ErrInvalidArgument, ErrRPC and ErrPanic; the kind is the
// caller's decision (leave, skip, evict), not the status code's spelling.
package wool
