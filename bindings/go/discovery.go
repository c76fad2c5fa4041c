package wool

// #include <stdlib.h>
// #include "wool.h"
import "C"

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// DiscoveryBackend chooses where Discover and WatchPool look for a pool's workers (the
// library's WOOL_DISCOVERY_* backends).
type DiscoveryBackend int

const (
	// LocalDiscovery reads the shared-memory registry that Wool's LocalDiscovery(namespace)
	// publishes on this host (WOOL_DISCOVERY_LOCAL).
	LocalDiscovery DiscoveryBackend = 0
	// LanDiscovery browses DNS-SD over multicast DNS, as Wool's LanDiscovery(namespace)
	// advertises its workers on the local network (WOOL_DISCOVERY_LAN).
	LanDiscovery DiscoveryBackend = 1
)

// The values above are the header's: an index out of range here fails the build if they drift.
var (
	_ = [1]int{}[LocalDiscovery-C.WOOL_DISCOVERY_LOCAL]
	_ = [1]int{}[LanDiscovery-C.WOOL_DISCOVERY_LAN]
)

// String returns "local" or "lan"; another value gives "DiscoveryBackend(N)".
func (b DiscoveryBackend) String() string {
	switch b {
	case LocalDiscovery:
		return "local"
	case LanDiscovery:
		return "lan"
	}
	return fmt.Sprintf("DiscoveryBackend(%d)", int(b))
}

// DiscoveredWorker is one worker of a pool as its discovery record publishes it (Wool's
// WorkerMetadata; the library's wool_worker_info). Pass it to ConnectWorker to reach it.
type DiscoveredWorker struct {
	// UID is the worker's UUID, hyphenated.
	UID string
	// Address is where it listens, "host:port": a target for Connect.
	Address string
	// PID is its process id on its host.
	PID int32
	// Version is the Wool version it runs.
	Version string
	// Tags are its tags, sorted (empty, not nil, when it has none).
	Tags []string
	// Extra is its extra metadata (empty, not nil, when it has none).
	Extra map[string]string
	// Secure reports whether it serves TLS (ConnectWorker then needs credentials).
	Secure bool
	// Identity is the name its certificate is issued for; "" when it advertises none.
	Identity string
	// Refusal is the admission gate's verdict (as Wool's WorkerProxy's) for the credentials
	// the listing was made with (none for Discover and WatchPool; see DiscoverAdmitted):
	// RefusalNone when admitted. ConnectWorker refuses a worker the gate refuses.
	Refusal Refusal
	// RefusalReason says why, e.g. `identity "w2" (accepted peers: w1)`; "" when admitted.
	RefusalReason string
}

// Refusal is which arm of the admission gate refused a discovered worker (the library's
// WOOL_DISCOVERY_REFUSAL_*), checked in this order: security, version, identity.
type Refusal int

const (
	// RefusalNone: admitted.
	RefusalNone Refusal = 0
	// RefusalSecurity: it serves TLS and there are no credentials, or it advertises plaintext
	// and there are credentials (which are never dropped because a record says so).
	RefusalSecurity Refusal = 1
	// RefusalVersion: its version is not PEP 440 or not compatible with this library's.
	RefusalVersion Refusal = 2
	// RefusalIdentity: the credentials' peers policy (WithPeers) does not accept the name it
	// advertises, or it advertises none.
	RefusalIdentity Refusal = 3
)

var (
	_ = [1]int{}[RefusalNone-C.WOOL_DISCOVERY_REFUSAL_NONE]
	_ = [1]int{}[RefusalSecurity-C.WOOL_DISCOVERY_REFUSAL_SECURITY]
	_ = [1]int{}[RefusalVersion-C.WOOL_DISCOVERY_REFUSAL_VERSION]
	_ = [1]int{}[RefusalIdentity-C.WOOL_DISCOVERY_REFUSAL_IDENTITY]
)

// String returns "", "security", "version" or "identity" (Wool's reason words); another value
// gives "Refusal(N)".
func (r Refusal) String() string {
	switch r {
	case RefusalNone:
		return ""
	case RefusalSecurity:
		return "security"
	case RefusalVersion:
		return "version"
	case RefusalIdentity:
		return "identity"
	}
	return fmt.Sprintf("Refusal(%d)", int(r))
}

// workerFromC copies the library's view of a worker (tags and extra decoded from its JSON).
func workerFromC(op string, info *C.wool_worker_info) (DiscoveredWorker, error) {
	w := DiscoveredWorker{
		UID:      C.GoString(info.uid),
		Address:  C.GoString(info.address),
		PID:      int32(info.pid),
		Version:  C.GoString(info.version),
		Secure:   bool(info.secure),
		Identity: C.GoString(info.identity),
		Tags:     []string{},
		Extra:    map[string]string{},
		Refusal:  Refusal(info.refusal),
	}
	if info.refusal_reason != nil {
		w.RefusalReason = C.GoString(info.refusal_reason)
	}
	if err := json.Unmarshal([]byte(C.GoString(info.tags_json)), &w.Tags); err != nil {
		return DiscoveredWorker{}, fmt.Errorf("wool: %s: the library's tags_json of worker %s: %w", op, w.UID, err)
	}
	if err := json.Unmarshal([]byte(C.GoString(info.extra_json)), &w.Extra); err != nil {
		return DiscoveredWorker{}, fmt.Errorf("wool: %s: the library's extra_json of worker %s: %w", op, w.UID, err)
	}
	if w.Tags == nil { // JSON null
		w.Tags = []string{}
	}
	if w.Extra == nil {
		w.Extra = map[string]string{}
	}
	return w, nil
}

// namespaceText checks a namespace for C (a NUL byte would cut it short) and copies it into C
// memory; the caller frees it.
func namespaceText(op, namespace string) (*C.char, error) {
	if strings.IndexByte(namespace, 0) >= 0 {
		return nil, invalidArgument(op, "", "the namespace contains a NUL byte")
	}
	return C.CString(namespace), nil
}

// Discover lists the workers of the pool published under namespace, as wool_discover: with
// LocalDiscovery the shared-memory registry on this host (a namespace no pool uses lists as
// empty; listen is ignored), with LanDiscovery DNS-SD answers gathered for listen (0 = the
// library's default, 1.5 s). Sorted by address. Records that cannot be read (half-written,
// foreign) are skipped. Blocks the calling goroutine (and its OS thread) until done.
//
// Errors: an *Error (Op "discover") matching ErrInvalidArgument for an empty namespace, one
// with a NUL byte (or, for LocalDiscovery, a "/"), an unknown backend or a negative listen;
// ErrTransient when the registry cannot be read or multicast DNS cannot start.
//
// Each worker's Refusal is the admission gate's verdict for a caller without credentials.
func Discover(namespace string, backend DiscoveryBackend, listen time.Duration) ([]DiscoveredWorker, error) {
	return DiscoverAdmitted(namespace, backend, listen, nil)
}

// DiscoverAdmitted is Discover with each worker's Refusal and RefusalReason being the
// admission gate's verdict (as Wool's WorkerProxy's, wool_discover_admitted) for a caller
// holding creds (nil = none): with credentials only workers advertising Secure are admitted,
// without only plaintext ones; then a compatible version; then, under a peers policy
// (Credentials.WithPeers), an accepted advertised name. Refused workers are listed so that the
// caller can say why; ConnectWorker refuses them.
//
// Errors: as Discover; ErrClosed when creds is closed.
func DiscoverAdmitted(namespace string, backend DiscoveryBackend, listen time.Duration, creds *Credentials) ([]DiscoveredWorker, error) {
	ns, err := namespaceText("discover", namespace)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(ns))
	list, err := listWith("discover", creds, func(credentials *C.wool_credentials, out **C.wool_worker_list) C.wool_status {
		return C.wool_discover_admitted(ns, C.int(backend), C.double(listen.Seconds()), credentials, out)
	})
	if err != nil {
		return nil, err
	}
	defer C.wool_worker_list_free(list)
	return workersFromList("discover", list)
}

// listWith runs one of the library's listing calls with creds' handle (nil = none) and
// returns the list it wrote; the caller frees it.
func listWith(op string, creds *Credentials, list func(*C.wool_credentials, **C.wool_worker_list) C.wool_status) (*C.wool_worker_list, error) {
	var out *C.wool_worker_list
	discover := func(credentials *C.wool_credentials) error {
		return call(op, "", func() C.wool_status { return list(credentials, &out) })
	}
	var err error
	if creds == nil {
		err = discover(nil)
	} else {
		err = creds.use(discover)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// listDNS runs wool_discover_dns for name at port; the caller frees the list.
func listDNS(op, name string, port uint16, timeout time.Duration, creds *Credentials) (*C.wool_worker_list, error) {
	if strings.IndexByte(name, 0) >= 0 {
		return nil, invalidArgument(op, "", "the name contains a NUL byte")
	}
	cName := C.CString(name)
	defer C.free(unsafe.Pointer(cName))
	return listWith(op, creds, func(credentials *C.wool_credentials, out **C.wool_worker_list) C.wool_status {
		return C.wool_discover_dns(cName, C.uint16_t(port), C.double(timeout.Seconds()), credentials, out)
	})
}

// DiscoverDNS lists the workers at every address the DNS name resolves to (A and AAAA
// records, e.g. a Kubernetes headless Service), each at port, sorted by address, as
// wool_discover_dns. A name that exists with no A/AAAA records lists as empty; one that does
// not exist (NXDOMAIN) is an error. The lookup waits at most timeout
// (0 = the library's default, 5 s). Blocks the calling goroutine (and its OS thread).
//
// A DNS record tells only the address: Identity is name, Secure false, Version empty; each
// worker's Refusal is the admission gate's verdict for creds (nil = none), a peers policy
// being applied to name and the credentials deciding TLS. Reach the admitted ones with
// ConnectDNS (ConnectWorker refuses DNS records, as wool_connect_worker does).
//
// Errors: an *Error (Op "discover") matching ErrInvalidArgument for a name that is not a DNS
// name (e.g. with a ":port"), one with a NUL byte, port 0 or a negative timeout;
// ErrTransient when the name does not exist (the Message says "NAME does not resolve"), the
// resolver configuration cannot be read, the lookup fails otherwise or times out, or it gives
// more than 10,000 addresses; ErrClosed when creds is closed.
func DiscoverDNS(name string, port uint16, timeout time.Duration, creds *Credentials) ([]DiscoveredWorker, error) {
	list, err := listDNS("discover", name, port, timeout, creds)
	if err != nil {
		return nil, err
	}
	defer C.wool_worker_list_free(list)
	return workersFromList("discover", list)
}

// ConnectDNS makes Connections to the workers DiscoverDNS lists that the admission gate
// admits for creds, in address order, as wool_discover_dns then wool_worker_list_connect for
// each: with creds each is reached over TLS and its certificate verified against name unless
// the credentials name another. Refused workers are left out (DiscoverDNS says why). The
// channel options among opts apply as for Connect. No I/O beyond the lookup; pass the result
// to IdleMany or RetireIdle, and Close each Connection.
//
// Errors: as DiscoverDNS; an *Error (Op "connect") matching ErrInvalidArgument when a
// channel option is refused (no Connection is left open then).
func ConnectDNS(name string, port uint16, timeout time.Duration, creds *Credentials, opts ...Option) ([]*Connection, error) {
	list, err := listDNS("discover", name, port, timeout, creds)
	if err != nil {
		return nil, err
	}
	defer C.wool_worker_list_free(list)
	workers, err := workersFromList("discover", list)
	if err != nil {
		return nil, err
	}
	if creds != nil {
		opts = append(append([]Option(nil), opts...), WithCredentials(creds))
	}
	connections := make([]*Connection, 0, len(workers))
	for i, w := range workers {
		if w.Refusal != RefusalNone {
			continue
		}
		index := C.size_t(i)
		conn, err := newConnection(w.Address, opts, func(credentials *C.wool_credentials, channel *C.wool_channel_options, out **C.wool_connection) C.wool_status {
			return C.wool_worker_list_connect(list, index, credentials, channel, out)
		})
		if err != nil {
			for _, c := range connections {
				c.Close()
			}
			return nil, err
		}
		connections = append(connections, conn)
	}
	return connections, nil
}

// workersFromList copies every record of a worker list.
func workersFromList(op string, list *C.wool_worker_list) ([]DiscoveredWorker, error) {
	count := int(C.wool_worker_list_count(list))
	workers := make([]DiscoveredWorker, 0, count)
	for i := 0; i < count; i++ {
		w, err := workerFromC(op, C.wool_worker_list_get(list, C.size_t(i)))
		if err != nil {
			return nil, err
		}
		workers = append(workers, w)
	}
	return workers, nil
}

// ConnectWorker makes a Connection to a discovered worker (its Address), as wool_connect_worker
// and Wool's WorkerProxy reach a worker they admitted: the worker must pass the admission gate
// for creds (see DiscoverAdmitted); with creds it is reached over TLS with them (never in
// plaintext because w says so), verified against the credentials' identity when set, else,
// under a peers policy, w.Identity, else the address (with no policy w.Identity is ignored).
// The channel options among opts apply as for Connect; creds, when not nil, replaces any
// WithCredentials among them. Only w.Address, w.Version, w.Secure and w.Identity are read, so
// a DiscoveredWorker filled in by hand works too. No I/O.
//
// Errors: an *Error (Op "connect") matching ErrInvalidArgument when the gate refuses the
// worker (the message gives the refusal), the address is not a target, the name to verify is
// neither a DNS name nor an IP address, a text has a NUL byte or a channel option is refused;
// ErrClosed when the credentials are closed.
func ConnectWorker(w DiscoveredWorker, creds *Credentials, opts ...Option) (*Connection, error) {
	for _, text := range [][2]string{{"the address", w.Address}, {"the identity", w.Identity}, {"the version", w.Version}} {
		if strings.IndexByte(text[1], 0) >= 0 {
			return nil, invalidArgument("connect", w.Address, text[0]+" contains a NUL byte")
		}
	}
	if creds != nil {
		opts = append(append([]Option(nil), opts...), WithCredentials(creds))
	}
	address, identity, version := C.CString(w.Address), C.CString(w.Identity), C.CString(w.Version)
	defer freeAll(address, identity, version)
	return newConnection(w.Address, opts, func(credentials *C.wool_credentials, channel *C.wool_channel_options, out **C.wool_connection) C.wool_status {
		// Only address, version, secure and identity are read (wool.h); the rest stay zero.
		info := C.wool_worker_info{address: address, version: version, identity: identity, secure: C.bool(w.Secure)}
		return C.wool_connect_worker(&info, credentials, channel, out)
	})
}

// DiscoveryEventKind is what happened to a worker in a watched pool (WOOL_DISCOVERY_EVENT_*).
type DiscoveryEventKind int

const (
	// WorkerAdded: a worker joined (also reported for each worker present when the watch
	// started).
	WorkerAdded DiscoveryEventKind = 1
	// WorkerUpdated: a worker's published metadata changed.
	WorkerUpdated DiscoveryEventKind = 2
	// WorkerDropped: a worker left; the event carries its last known metadata.
	WorkerDropped DiscoveryEventKind = 3
)

var (
	_ = [1]int{}[WorkerAdded-C.WOOL_DISCOVERY_EVENT_ADDED]
	_ = [1]int{}[WorkerUpdated-C.WOOL_DISCOVERY_EVENT_UPDATED]
	_ = [1]int{}[WorkerDropped-C.WOOL_DISCOVERY_EVENT_DROPPED]
)

// String returns "added", "updated" or "dropped"; another value gives "DiscoveryEventKind(N)".
func (k DiscoveryEventKind) String() string {
	switch k {
	case WorkerAdded:
		return "added"
	case WorkerUpdated:
		return "updated"
	case WorkerDropped:
		return "dropped"
	}
	return fmt.Sprintf("DiscoveryEventKind(%d)", int(k))
}

// DiscoveryEvent is one change in a watched pool.
type DiscoveryEvent struct {
	Kind   DiscoveryEventKind
	Worker DiscoveredWorker
}

// watchSlice is the longest one wool_watch_next waits, so that Next notices its context and
// Close within this long.
const watchSlice = 100 * time.Millisecond

// Watch follows a pool's workers joining, changing and leaving (the library's wool_watch, which
// runs on a library thread and queues its events until Next takes them). Safe for concurrent
// use: each event goes to one caller of Next.
//
// Close it when done: a cleanup (runtime.AddCleanup) stops a forgotten Watch, but only once the
// garbage collector notices it; until then its library thread keeps following the pool.
type Watch struct {
	namespace string
	handle    *watchHandle
	cleanup   runtime.Cleanup // frees handle once the Watch is unreachable
}

// watchHandle is the C handle of a Watch, separate from it so that the cleanup can free it
// without keeping the Watch reachable.
type watchHandle struct {
	closing atomic.Bool
	mu      sync.Mutex // held around each wool_watch_next and the copy of its worker; free under it
	ptr     *C.wool_watch
}

// WatchPool starts watching the pool published under namespace (backends as for Discover),
// as wool_watch_new: the watch first reports every worker present (WorkerAdded), then each
// join, change and leave as the pool publishes it.
//
// Errors: an *Error (Op "watch") matching ErrInvalidArgument as for Discover, or ErrTransient
// when the watch cannot start.
func WatchPool(namespace string, backend DiscoveryBackend) (*Watch, error) {
	ns, err := namespaceText("watch", namespace)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(ns))
	var ptr *C.wool_watch
	if err := call("watch", "", func() C.wool_status {
		return C.wool_watch_new(ns, C.int(backend), &ptr)
	}); err != nil {
		return nil, err
	}
	watch := &Watch{namespace: namespace, handle: &watchHandle{ptr: ptr}}
	watch.cleanup = runtime.AddCleanup(watch, (*watchHandle).free, watch.handle)
	return watch, nil
}

// Next waits for the watch's next event, until ctx ends. It waits in the library
// (wool_watch_next) in slices of at most 100 ms, holding an OS thread meanwhile, and checks
// ctx between them, so it returns within about 100 ms of ctx ending or of Close.
//
// Errors: ctx's error, wrapped (errors.Is(err, context.Canceled) or
// context.DeadlineExceeded) when ctx ends before an event; ErrClosed, wrapped, once the
// watch is closed; an *Error from the library otherwise (not expected).
func (w *Watch) Next(ctx context.Context) (DiscoveryEvent, error) {
	for {
		if w.handle.closing.Load() {
			return DiscoveryEvent{}, opError("watch next", "", ErrClosed)
		}
		if err := ctx.Err(); err != nil {
			return DiscoveryEvent{}, opError("watch next", "", err)
		}
		slice := watchSlice
		if deadline, ok := ctx.Deadline(); ok {
			slice = min(slice, time.Until(deadline))
		}
		// A watch that has ended answers ErrTransient (its backend stopped): returned as is.
		event, got, err := w.handle.nextWithin(max(slice, 0))
		runtime.KeepAlive(w)
		if err != nil || got {
			return event, err
		}
	}
}

// nextWithin runs one wool_watch_next of at most slice and copies its event, if any.
func (h *watchHandle) nextWithin(slice time.Duration) (DiscoveryEvent, bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ptr == nil {
		return DiscoveryEvent{}, false, opError("watch next", "", ErrClosed)
	}
	var kind C.int
	var info *C.wool_worker_info
	if err := call("watch next", "", func() C.wool_status {
		return C.wool_watch_next(h.ptr, C.double(slice.Seconds()), &kind, &info)
	}); err != nil {
		return DiscoveryEvent{}, false, err
	}
	if kind == C.WOOL_DISCOVERY_EVENT_NONE || info == nil {
		return DiscoveryEvent{}, false, nil
	}
	worker, err := workerFromC("watch next", info) // info lives until the next wool_watch_next
	if err != nil {
		return DiscoveryEvent{}, false, err
	}
	return DiscoveryEvent{Kind: DiscoveryEventKind(kind), Worker: worker}, true, nil
}

// Namespace returns the namespace watched.
func (w *Watch) Namespace() string { return w.namespace }

// Close stops the watch and releases it (wool_watch_free). Next calls in progress return
// ErrClosed within about 100 ms; Close waits for the one inside the library. Idempotent;
// always returns nil.
func (w *Watch) Close() error {
	w.handle.free()
	w.cleanup.Stop() // a no-op when already stopped
	runtime.KeepAlive(w)
	return nil
}

// free stops and frees the C watch unless already freed (Close and the cleanup may both run it).
func (h *watchHandle) free() {
	h.closing.Store(true)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ptr != nil {
		C.wool_watch_free(h.ptr)
		h.ptr = nil
	}
}

// infinity is the library's "no limit" for seconds.
var infinity = C.double(math.Inf(1))
