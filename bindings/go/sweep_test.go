package wool_test

// The fleet calls against real processes: Discover and WatchPool against real Wool pools
// (tests/interop/wool_pool.py, Wool 0.15.7, LocalDiscovery in the shared-memory registry),
// compared with Wool's own subscriber; ConnectWorker to the workers found; RetireIdle against
// wool-worker processes. The LAN backend needs network namespaces and is tested in Rust
// (tests/); here only its argument checks.

import (
	"context"
	"errors"
	"net"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	wool "github.com/libwool/libwool/bindings/go"
	"github.com/libwool/libwool/bindings/go/internal/workertest"
)

// poolTimeout bounds waiting for a pool's workers to show up in, or leave, a watch.
const poolTimeout = 30 * time.Second

func discover(t *testing.T, namespace string) []wool.DiscoveredWorker {
	t.Helper()
	workers, err := wool.Discover(namespace, wool.LocalDiscovery, 0)
	if err != nil {
		t.Fatalf("Discover(%q): %v", namespace, err)
	}
	return workers
}

// Given a real Wool pool of 3 workers under a fresh namespace, when it is listed with
// Discover, then the listing is exactly what Wool's own subscriber lists (uid, address, pid,
// version, tags, extra, secure, identity), sorted by address; and each worker found is
// reachable through ConnectWorker (a positive idle reading).
func TestDiscoverListsWhatWoolsSubscriberLists(t *testing.T) {
	t.Parallel()
	namespace := workertest.UniqueNamespace(t)
	workertest.StartWoolPool(t, namespace, 3)

	got := discover(t, namespace)
	want := workertest.WoolSubscribe(t, namespace, 2)

	if len(got) != 3 || len(want) != 3 {
		t.Fatalf("Discover found %d workers, Wool's subscriber %d; want 3 each:\n%+v\n%+v", len(got), len(want), got, want)
	}
	if !sort.SliceIsSorted(got, func(i, j int) bool { return got[i].Address < got[j].Address }) {
		t.Errorf("Discover's listing is not sorted by address: %+v", got)
	}
	sort.Slice(want, func(i, j int) bool { return want[i].Address < want[j].Address })
	for i, w := range want {
		identity := ""
		if w.Identity != nil {
			identity = *w.Identity
		}
		expected := wool.DiscoveredWorker{
			UID: w.UID, Address: w.Address, PID: w.PID, Version: w.Version,
			Tags: w.Tags, Extra: w.Extra, Secure: w.Secure, Identity: identity,
		}
		if !reflect.DeepEqual(got[i], expected) {
			t.Errorf("worker %d:\n Discover: %+v\n Wool:     %+v", i, got[i], expected)
		}
	}
	for _, w := range got {
		conn, err := wool.ConnectWorker(w, nil)
		if err != nil {
			t.Fatalf("ConnectWorker(%+v): %v", w, err)
		}
		t.Cleanup(func() { conn.Close() })
		if conn.Target() != w.Address {
			t.Errorf("Target() = %q, want the worker's address %q", conn.Target(), w.Address)
		}
		if reading := mustIdle(t, conn); reading <= 0 {
			t.Errorf("idle of %s = %v, want > 0", w.Address, reading)
		}
	}
}

// Given a namespace no pool uses, when it is listed, then the listing is empty, not an error.
func TestDiscoverOfAnUnusedNamespaceIsEmpty(t *testing.T) {
	t.Parallel()
	if workers := discover(t, workertest.UniqueNamespace(t)); len(workers) != 0 {
		t.Fatalf("Discover of an unused namespace: %+v", workers)
	}
}

// nextEvent waits for a watch's next event, failing the test when none comes within timeout.
func nextEvent(t *testing.T, watch *wool.Watch, timeout time.Duration) wool.DiscoveryEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	event, err := watch.Next(ctx)
	if err != nil {
		t.Fatalf("Watch.Next: %v", err)
	}
	return event
}

// Given a watch on a fresh namespace, when a Wool pool of 2 workers starts under it, then the
// watch reports both as added (the workers Discover lists); when the pool is terminated, then
// it reports both as dropped, with their metadata; after Close, Next fails with ErrClosed.
func TestWatchSeesWorkersJoinAndLeave(t *testing.T) {
	t.Parallel()
	namespace := workertest.UniqueNamespace(t)
	watch, err := wool.WatchPool(namespace, wool.LocalDiscovery)
	if err != nil {
		t.Fatalf("WatchPool: %v", err)
	}
	defer watch.Close()
	if watch.Namespace() != namespace {
		t.Errorf("Namespace() = %q, want %q", watch.Namespace(), namespace)
	}

	pool := workertest.StartWoolPool(t, namespace, 2)
	listed := map[string]wool.DiscoveredWorker{}
	for _, w := range discover(t, namespace) {
		listed[w.UID] = w
	}
	if len(listed) != 2 {
		t.Fatalf("Discover after the pool started: %+v", listed)
	}

	added := map[string]wool.DiscoveredWorker{}
	for len(added) < 2 {
		event := nextEvent(t, watch, poolTimeout)
		switch event.Kind {
		case wool.WorkerAdded, wool.WorkerUpdated:
			added[event.Worker.UID] = event.Worker
		default:
			t.Fatalf("while the pool starts: %v %+v", event.Kind, event.Worker)
		}
	}
	if !reflect.DeepEqual(added, listed) {
		t.Fatalf("the watch saw\n %+v\nDiscover lists\n %+v", added, listed)
	}

	pool.Terminate(t)
	dropped := map[string]wool.DiscoveredWorker{}
	for len(dropped) < 2 {
		event := nextEvent(t, watch, poolTimeout)
		if event.Kind == wool.WorkerDropped {
			dropped[event.Worker.UID] = event.Worker
		}
	}
	for uid, w := range dropped {
		if want, ok := listed[uid]; !ok || w.Address != want.Address || w.PID != want.PID {
			t.Errorf("dropped %+v, which is not the pool's worker %+v", w, want)
		}
	}
	if workers := discover(t, namespace); len(workers) != 0 {
		t.Errorf("Discover after the pool ended: %+v", workers)
	}

	watch.Close()
	watch.Close() // idempotent
	if _, err := watch.Next(context.Background()); !errors.Is(err, wool.ErrClosed) {
		t.Fatalf("Next after Close: %v, want ErrClosed", err)
	}
}

// Given a watch on a quiet namespace, when Next's context ends (a deadline, a cancellation),
// then Next returns the context's error; when the watch is closed while Next waits with no
// deadline, then Next returns ErrClosed.
func TestWatchNextEndsWithItsContextAndWithClose(t *testing.T) {
	t.Parallel()
	watch, err := wool.WatchPool(workertest.UniqueNamespace(t), wool.LocalDiscovery)
	if err != nil {
		t.Fatalf("WatchPool: %v", err)
	}
	defer watch.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if event, err := watch.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next on a quiet pool with a deadline: %+v, %v; want context.DeadlineExceeded", event, err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	if event, err := watch.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next on a quiet pool, cancelled: %+v, %v; want context.Canceled", event, err)
	}

	done := make(chan error, 1)
	go func() {
		_, err := watch.Next(context.Background())
		done <- err
	}()
	time.Sleep(200 * time.Millisecond)
	watch.Close()
	select {
	case err := <-done:
		if !errors.Is(err, wool.ErrClosed) {
			t.Fatalf("Next when the watch was closed: %v, want ErrClosed", err)
		}
	case <-time.After(callTimeout):
		t.Fatal("Next did not return after Close")
	}
}

// Given bad discovery arguments (an empty namespace, for either backend; an unknown backend;
// a negative listening window; a NUL byte; a "/" for the local registry), when Discover or
// WatchPool is called, then each fails with ErrInvalidArgument.
func TestDiscoveryRefusesBadArguments(t *testing.T) {
	t.Parallel()
	namespace := workertest.UniqueNamespace(t)
	for _, c := range []struct {
		name      string
		namespace string
		backend   wool.DiscoveryBackend
		listen    time.Duration
	}{
		{"empty namespace", "", wool.LocalDiscovery, 0},
		{"empty namespace on the LAN", "", wool.LanDiscovery, 0},
		{"unknown backend", namespace, wool.DiscoveryBackend(7), 0},
		{"negative backend", namespace, wool.DiscoveryBackend(-1), 0},
		{"negative listen", namespace, wool.LocalDiscovery, -time.Second},
		{"NUL in the namespace", "a\x00b", wool.LocalDiscovery, 0},
		{"slash in a local namespace", "a/b", wool.LocalDiscovery, 0},
	} {
		workers, err := wool.Discover(c.namespace, c.backend, c.listen)
		if workers != nil {
			t.Errorf("%s: Discover gave %+v", c.name, workers)
		}
		t.Run(c.name+"/Discover", func(t *testing.T) { requireKind(t, err, wool.ErrInvalidArgument) })
		if c.listen != 0 {
			continue // WatchPool has no listening window
		}
		watch, err := wool.WatchPool(c.namespace, c.backend)
		if watch != nil {
			watch.Close()
			t.Errorf("%s: WatchPool gave a watch", c.name)
		}
		t.Run(c.name+"/WatchPool", func(t *testing.T) { requireKind(t, err, wool.ErrInvalidArgument) })
	}
}

// Given hand-filled workers, when ConnectWorker is called, then a secure one without
// credentials, a bad address and a bad identity fail with ErrInvalidArgument; a plaintext one
// at a real wool-worker's address reaches it.
func TestConnectWorker(t *testing.T) {
	t.Parallel()
	worker := workertest.StartWorker(t)
	for name, w := range map[string]wool.DiscoveredWorker{
		"secure without credentials": {Address: worker.Address, Version: "0.15.7", Secure: true},
		"no version":                 {Address: worker.Address},
		"no port":                    {Address: "127.0.0.1"},
		"NUL in the address":         {Address: "127.0.0.1:1\x00"},
	} {
		conn, err := wool.ConnectWorker(w, nil)
		if conn != nil {
			conn.Close()
			t.Errorf("%s: ConnectWorker made a connection", name)
		}
		t.Run(name, func(t *testing.T) { requireKind(t, err, wool.ErrInvalidArgument) })
	}
	conn, err := wool.ConnectWorker(wool.DiscoveredWorker{Address: worker.Address, Version: "0.15.7"}, nil,
		wool.WithConnectTimeout(5*time.Second))
	if err != nil {
		t.Fatalf("ConnectWorker: %v", err)
	}
	defer conn.Close()
	if reading := mustIdle(t, conn); reading <= 0 {
		t.Errorf("idle = %v, want > 0", reading)
	}
}

// Given a wool-worker on 127.0.0.1, when "localhost" is listed at its port, then its address
// is listed with the DNS name as identity and admitted, and ConnectDNS reaches it; a name
// with a port, port 0 and a NUL byte are ErrInvalidArgument.
func TestDiscoverDNSListsAndConnectsWhatANameResolvesTo(t *testing.T) {
	t.Parallel()
	worker := workertest.StartWorker(t)
	_, portText, err := net.SplitHostPort(worker.Address)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		t.Fatal(err)
	}
	listed, err := wool.DiscoverDNS("localhost", uint16(port), 5*time.Second, nil)
	if err != nil {
		t.Fatalf("DiscoverDNS: %v", err)
	}
	found := false
	for _, w := range listed {
		if w.Address == worker.Address {
			found = true
			if w.Identity != "localhost" || w.Refusal != wool.RefusalNone {
				t.Errorf("listed %+v, want identity localhost, admitted", w)
			}
		}
	}
	if !found {
		t.Fatalf("DiscoverDNS(localhost) = %+v, want %s among them", listed, worker.Address)
	}
	conns, err := wool.ConnectDNS("localhost", uint16(port), 5*time.Second, nil, wool.WithConnectTimeout(5*time.Second))
	if err != nil {
		t.Fatalf("ConnectDNS: %v", err)
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	if len(conns) != len(listed) {
		t.Fatalf("ConnectDNS made %d connections for %d listed workers", len(conns), len(listed))
	}
	for i, c := range conns {
		if listed[i].Address == worker.Address {
			if reading := mustIdle(t, c); reading <= 0 {
				t.Errorf("idle = %v, want > 0", reading)
			}
		}
	}
	for name, args := range map[string]struct {
		name string
		port uint16
	}{"a port in the name": {"localhost:80", 80}, "port 0": {"localhost", 0}, "NUL": {"local\x00host", 80}} {
		_, err := wool.DiscoverDNS(args.name, args.port, time.Second, nil)
		t.Run(name, func(t *testing.T) { requireKind(t, err, wool.ErrInvalidArgument) })
	}
}

// Given a DNS name that does not exist ("nosuchhost.invalid.": the special-use .invalid zone,
// answered NXDOMAIN by the resolver itself; the final dot keeps resolv.conf's search list out,
// so no query leaves the machine), when DiscoverDNS and ConnectDNS list it, then each fails
// with ErrTransient saying the name does not resolve, rather than listing an empty fleet.
func TestADNSNameThatDoesNotResolveIsAnError(t *testing.T) {
	t.Parallel()
	workers, err := wool.DiscoverDNS("nosuchhost.invalid.", 50051, 5*time.Second, nil)
	werr := requireKind(t, err, wool.ErrTransient)
	if !strings.Contains(werr.Message, "nosuchhost.invalid. does not resolve") || workers != nil {
		t.Errorf("DiscoverDNS = %v, %v; want no workers and the name does not resolve", workers, err)
	}
	conns, err := wool.ConnectDNS("nosuchhost.invalid.", 50051, 5*time.Second, nil)
	werr = requireKind(t, err, wool.ErrTransient)
	if !strings.Contains(werr.Message, "does not resolve") || conns != nil {
		t.Errorf("ConnectDNS = %v, %v; want no connections and the name does not resolve", conns, err)
	}
}

// Given a one-way TLS wool-worker, when it is reached through ConnectWorker as a secure
// discovered worker with the CA's credentials, then polls succeed, verified against the
// advertised identity ("localhost", a name in its certificate) or, advertising none, the
// address; a worker advertising an identity its certificate lacks fails with ErrHandshake; a
// bad advertised identity fails ConnectWorker with ErrInvalidArgument, and closed credentials
// with ErrClosed.
func TestConnectWorkerOverTLS(t *testing.T) {
	t.Parallel()
	pki := workertest.NewPKI(t)
	worker := workertest.StartWorker(t, pki.OneWayArgs()...)
	creds, err := wool.CredentialsFromPEM(pki.CAPEM, nil, nil, false, "")
	if err != nil {
		t.Fatalf("CredentialsFromPEM: %v", err)
	}
	defer creds.Close()
	gated, err := creds.WithPeers("localhost", "elsewhere.example", "not a name!")
	if err != nil {
		t.Fatalf("WithPeers: %v", err)
	}
	defer gated.Close()
	reach := func(identity string) (*wool.Connection, error) {
		// Under a peers policy accepting them, the advertised names are verified.
		return wool.ConnectWorker(wool.DiscoveredWorker{Address: worker.Address, Version: "0.15.7", Secure: true, Identity: identity}, gated)
	}

	for _, identity := range []string{"localhost", ""} {
		conn, err := reach(identity)
		if identity == "" { // no name advertised: refused under a policy, the address without
			requireKind(t, err, wool.ErrInvalidArgument)
			conn, err = wool.ConnectWorker(wool.DiscoveredWorker{Address: worker.Address, Version: "0.15.7", Secure: true}, creds)
		}
		if err != nil {
			t.Fatalf("ConnectWorker(identity %q): %v", identity, err)
		}
		defer conn.Close()
		if reading := mustIdle(t, conn); reading <= 0 {
			t.Errorf("identity %q: idle %v", identity, reading)
		}
	}
	wrong, err := reach("elsewhere.example")
	if err != nil {
		t.Fatalf("ConnectWorker(identity elsewhere.example): %v", err)
	}
	defer wrong.Close()
	_, err = idle(wrong)
	requireKind(t, err, wool.ErrHandshake)

	_, err = reach("not a name!")
	requireKind(t, err, wool.ErrInvalidArgument)
	gated.Close()
	if _, err := reach("localhost"); !errors.Is(err, wool.ErrClosed) {
		t.Errorf("ConnectWorker with closed credentials: %v, want ErrClosed", err)
	}
}

// idleWorkers starts n wool-workers and returns them with a connection each, once every one
// has been idle at least threshold.
func idleWorkers(t *testing.T, n int, threshold time.Duration) ([]*workertest.Process, []*wool.Connection) {
	t.Helper()
	workers := make([]*workertest.Process, n)
	conns := make([]*wool.Connection, n)
	for i := range workers {
		workers[i] = workertest.StartWorker(t)
		conns[i] = connect(t, workers[i].Address)
	}
	for _, conn := range conns {
		eventually(t, conn.Target()+" idle past the threshold", callTimeout, func() bool {
			return mustIdle(t, conn) >= threshold
		})
	}
	return workers, conns
}

func retire(t *testing.T, conns []*wool.Connection, policy wool.RetirePolicy) []wool.RetireDecision {
	t.Helper()
	decisions, err := wool.RetireIdle(conns, policy, callTimeout, len(conns))
	if err != nil {
		t.Fatalf("RetireIdle(%+v): %v", policy, err)
	}
	if len(decisions) != len(conns) {
		t.Fatalf("RetireIdle gave %d decisions for %d connections", len(decisions), len(conns))
	}
	for i, d := range decisions {
		t.Logf("decision %d: %v retire=%v idle=%v (%v) stopped=%v (%v)", i, d.Reason, d.Retire, d.Idle, d.IdleErr, d.Stopped, d.StopErr)
	}
	return decisions
}

func requireExited(t *testing.T, worker *workertest.Process) {
	t.Helper()
	if code, exited := worker.WaitExit(callTimeout); !exited || code != 0 {
		t.Fatalf("worker %s after its stop: exited %v, status %d; want exit status 0", worker.Address, exited, code)
	}
}

// Given three wool-workers, two idle past the threshold and one with a task in flight, when
// a round with the default policy runs, then the idle two are retired (reason idle, stopped
// without error, their processes exit with status 0) and the busy one is kept with reason
// busy (idle exactly 0, not stopped) and still answers.
func TestRetireIdleRetiresIdleWorkersAndKeepsABusyOne(t *testing.T) {
	t.Parallel()
	threshold := 100 * time.Millisecond
	workers, conns := idleWorkers(t, 3, threshold)
	workertest.StartDispatch(t, workers[2].Address, "echo", []byte("hello"))

	policy := wool.NewRetirePolicy(threshold)
	if policy.Grace != 30*time.Second || policy.StopTimeout != 60*time.Second || policy.KeepMin != 0 ||
		policy.MaxStops != 0 || policy.DryRun {
		t.Errorf("NewRetirePolicy = %+v, want the library's defaults (grace 30 s, stop timeout 60 s)", policy)
	}
	decisions := retire(t, conns, policy)

	for i, d := range decisions[:2] {
		if d.Reason != wool.ReasonIdle || !d.Retire || !d.Stopped || d.StopErr != nil || d.IdleErr != nil || d.Idle < threshold {
			t.Errorf("idle worker %d: %+v; want retired and stopped, idle >= %v", i, d, threshold)
		}
		requireExited(t, workers[i])
	}
	busy := decisions[2]
	if busy.Reason != wool.ReasonBusy || busy.Retire || busy.Stopped || busy.IdleErr != nil || busy.Idle != 0 || busy.StopErr != nil {
		t.Errorf("busy worker: %+v; want kept with reason busy, idle exactly 0, not stopped", busy)
	}
	if reading := mustIdle(t, conns[2]); reading != 0 {
		t.Errorf("the busy worker after the round: idle %v, want 0 (its task still in flight)", reading)
	}
}

// Given two idle wool-workers, when a dry-run round runs, then both are decided retired (reason
// idle) but neither is stopped: both still answer polls.
func TestRetireIdleDryRunStopsNothing(t *testing.T) {
	t.Parallel()
	threshold := 100 * time.Millisecond
	_, conns := idleWorkers(t, 2, threshold)
	policy := wool.NewRetirePolicy(threshold)
	policy.DryRun = true

	for i, d := range retire(t, conns, policy) {
		if d.Reason != wool.ReasonIdle || !d.Retire || d.Stopped || d.StopErr != nil {
			t.Errorf("worker %d: %+v; want decided retired, not stopped", i, d)
		}
	}
	for _, conn := range conns {
		if reading := mustIdle(t, conn); reading < threshold {
			t.Errorf("%s after a dry run: idle %v", conn.Target(), reading)
		}
	}
}

// Given three idle wool-workers, when a round with KeepMin 2 runs, then exactly one is retired,
// the most idle of the three (its process exits with status 0), and the other two are kept
// with reason minimum and still answer.
func TestRetireIdleHonoursKeepMin(t *testing.T) {
	t.Parallel()
	threshold := 100 * time.Millisecond
	workers, conns := idleWorkers(t, 3, threshold)
	policy := wool.NewRetirePolicy(threshold)
	policy.KeepMin = 2

	decisions := retire(t, conns, policy)
	retired := -1
	for i, d := range decisions {
		switch {
		case d.Reason == wool.ReasonIdle && d.Stopped && d.StopErr == nil:
			if retired >= 0 {
				t.Fatalf("two workers retired with KeepMin 2 of 3: %d and %d", retired, i)
			}
			retired = i
		case d.Reason != wool.ReasonMinimum || d.Retire || d.Stopped:
			t.Errorf("worker %d: %+v; want kept with reason minimum", i, d)
		}
	}
	if retired < 0 {
		t.Fatal("no worker retired")
	}
	for i, d := range decisions {
		if d.Idle > decisions[retired].Idle {
			t.Errorf("worker %d (idle %v) was more idle than the retired worker %d (idle %v)", i, d.Idle, retired, decisions[retired].Idle)
		}
	}
	requireExited(t, workers[retired])
	for i, conn := range conns {
		if i != retired {
			mustIdle(t, conn)
		}
	}
}

// Given three idle wool-workers, when a round with MaxStops 1 runs, then one is retired and
// two are kept with reason round-limit.
func TestRetireIdleHonoursMaxStops(t *testing.T) {
	t.Parallel()
	threshold := 100 * time.Millisecond
	workers, conns := idleWorkers(t, 3, threshold)
	policy := wool.NewRetirePolicy(threshold)
	policy.MaxStops = 1

	counts := map[wool.RetireReason]int{}
	for i, d := range retire(t, conns, policy) {
		counts[d.Reason]++
		if d.Reason == wool.ReasonIdle {
			requireExited(t, workers[i])
		}
	}
	if counts[wool.ReasonIdle] != 1 || counts[wool.ReasonRoundLimit] != 2 {
		t.Errorf("reasons %v; want 1 idle, 2 round-limit", counts)
	}
}

// Given a connection to an address where nothing listens, a nil connection and a closed one,
// when a round runs, then all three are kept: unreachable (ErrTransient), poll-failed
// (ErrInvalidArgument) and poll-failed (ErrClosed).
func TestRetireIdleKeepsWhatItCannotPoll(t *testing.T) {
	t.Parallel()
	worker := workertest.StartWorker(t)
	server := workertest.StartHoldServer(t)
	address := server.Address()
	server.Release() // the port is now closed
	unreachable := connect(t, address)
	closed := connect(t, worker.Address)
	closed.Close()

	decisions := retire(t, []*wool.Connection{unreachable, nil, closed}, wool.NewRetirePolicy(0))
	for i, want := range []wool.RetireReason{wool.ReasonUnreachable, wool.ReasonPollFailed, wool.ReasonPollFailed} {
		if d := decisions[i]; d.Reason != want || d.Retire || d.Stopped {
			t.Errorf("decision %d: %+v; want kept with reason %v", i, d, want)
		}
	}
	requireKind(t, decisions[0].IdleErr, wool.ErrTransient)
	requireKind(t, decisions[1].IdleErr, wool.ErrInvalidArgument)
	if !errors.Is(decisions[2].IdleErr, wool.ErrClosed) {
		t.Errorf("closed connection: IdleErr %v, want ErrClosed", decisions[2].IdleErr)
	}
	if reading := mustIdle(t, connect(t, worker.Address)); reading <= 0 {
		t.Errorf("the worker behind the closed connection: idle %v", reading)
	}
}

// Given a live connection used by a round, when it is closed while the round runs, then the
// round still completes with its decision (the library keeps what the round needs), and the
// handle is released at once.
func TestRetireIdleKeepsAConnectionClosedDuringTheRound(t *testing.T) {
	t.Parallel()
	conn := connect(t, workertest.StartHoldServer(t).Address()) // never answers
	done := make(chan []wool.RetireDecision, 1)
	go func() {
		decisions, _ := wool.RetireIdle([]*wool.Connection{conn}, wool.NewRetirePolicy(0), time.Second, 1)
		done <- decisions
	}()
	time.Sleep(200 * time.Millisecond)
	conn.Close()
	var decisions []wool.RetireDecision
	select {
	case decisions = <-done:
	case <-time.After(callTimeout):
		t.Fatal("RetireIdle did not return")
	}
	if len(decisions) != 1 || decisions[0].Reason != wool.ReasonUnreachable {
		t.Fatalf("decisions %+v; want one, unreachable (the poll's deadline passed)", decisions)
	}
	if !wool.Freed(conn) {
		t.Error("Close during the round did not free the handle")
	}
}

// Given bad policies and arguments, when RetireIdle is called, then each fails with
// ErrInvalidArgument before polling anything; an empty round with a good policy gives no
// decisions and no error.
func TestRetireIdleRefusesBadArguments(t *testing.T) {
	t.Parallel()
	worker := workertest.StartWorker(t)
	conns := []*wool.Connection{connect(t, worker.Address)}
	policy := func(change func(*wool.RetirePolicy)) wool.RetirePolicy {
		p := wool.NewRetirePolicy(0)
		change(&p)
		return p
	}
	for name, c := range map[string]struct {
		policy  wool.RetirePolicy
		timeout time.Duration
	}{
		"stop timeout not past the grace": {policy(func(p *wool.RetirePolicy) { p.StopTimeout = p.Grace }), callTimeout},
		"zero stop timeout":               {policy(func(p *wool.RetirePolicy) { p.StopTimeout = 0 }), callTimeout},
		"grace forever with a timeout":    {policy(func(p *wool.RetirePolicy) { p.Grace = wool.GraceForever }), callTimeout},
		"negative threshold":              {policy(func(p *wool.RetirePolicy) { p.IdleThreshold = -time.Second }), callTimeout},
		"negative keep-min":               {policy(func(p *wool.RetirePolicy) { p.KeepMin = -1 }), callTimeout},
		"negative max stops":              {policy(func(p *wool.RetirePolicy) { p.MaxStops = -1 }), callTimeout},
		"zero poll timeout":               {wool.NewRetirePolicy(0), 0},
		"negative poll timeout":           {wool.NewRetirePolicy(0), -time.Second},
	} {
		decisions, err := wool.RetireIdle(conns, c.policy, c.timeout, 1)
		if decisions != nil {
			t.Errorf("%s: decisions %+v", name, decisions)
		}
		t.Run(name, func(t *testing.T) { requireKind(t, err, wool.ErrInvalidArgument) })
	}
	if reading := mustIdle(t, conns[0]); reading <= 0 {
		t.Errorf("the worker after refused rounds: idle %v", reading)
	}
	forever := policy(func(p *wool.RetirePolicy) { p.Grace, p.StopTimeout = wool.GraceForever, wool.NoStopTimeout })
	if decisions, err := wool.RetireIdle(nil, forever, callTimeout, 1); err != nil || len(decisions) != 0 {
		t.Errorf("an empty round with an unbounded grace: %+v, %v", decisions, err)
	}
}

// The reasons' names are the library's.
func TestRetireReasonNamesComeFromTheLibrary(t *testing.T) {
	t.Parallel()
	for reason, want := range map[wool.RetireReason]string{
		wool.ReasonIdle: "idle", wool.ReasonBusy: "busy", wool.ReasonBelowThreshold: "below-threshold",
		wool.ReasonMinimum: "minimum", wool.ReasonRoundLimit: "round-limit",
		wool.ReasonIdleUnavailable: "idle-unavailable", wool.ReasonUnreachable: "unreachable",
		wool.ReasonPollFailed: "poll-failed", wool.RetireReason(8): "unknown", wool.RetireReason(-1): "unknown",
	} {
		if got := reason.String(); got != want {
			t.Errorf("RetireReason(%d).String() = %q, want %q", int(reason), got, want)
		}
	}
}

// Given a plaintext Wool pool, when it is listed with credentials (DiscoverAdmitted), then
// every worker is refused on security and ConnectWorker with those credentials refuses it
// (before the admission gate it dropped the credentials and connected in plaintext); given a
// worker advertising "w2" and credentials whose peers policy accepts only "w1", ConnectWorker
// refuses it with a reason naming the accepted peers; a blank peer name is refused.
func TestTheAdmissionGateRefusesThroughTheBinding(t *testing.T) {
	t.Parallel()
	namespace := workertest.UniqueNamespace(t)
	workertest.StartWoolPool(t, namespace, 2)
	pki := workertest.NewPKI(t)
	creds, err := wool.CredentialsFromFiles(pki.CAPath, "", "", false, "")
	if err != nil {
		t.Fatal(err)
	}
	defer creds.Close()
	listed, err := wool.DiscoverAdmitted(namespace, wool.LocalDiscovery, 0, creds)
	if err != nil || len(listed) != 2 {
		t.Fatalf("DiscoverAdmitted: %+v, %v", listed, err)
	}
	for _, w := range listed {
		if w.Refusal != wool.RefusalSecurity || w.RefusalReason == "" {
			t.Errorf("a plaintext worker listed with credentials: %+v", w)
		}
		if conn, err := wool.ConnectWorker(w, creds); !errors.Is(err, wool.ErrInvalidArgument) {
			if conn != nil {
				conn.Close()
			}
			t.Errorf("ConnectWorker(%+v, creds) = %v, want ErrInvalidArgument", w, err)
		}
	}
	for _, w := range discover(t, namespace) {
		if w.Refusal != wool.RefusalNone {
			t.Errorf("a plaintext worker listed without credentials: %+v", w)
		}
	}
	gated, err := creds.WithPeers("w1")
	if err != nil {
		t.Fatal(err)
	}
	defer gated.Close()
	w2 := wool.DiscoveredWorker{Address: "127.0.0.1:1", Version: "0.15.7", Secure: true, Identity: "w2"}
	_, err = wool.ConnectWorker(w2, gated)
	if !errors.Is(err, wool.ErrInvalidArgument) || !strings.Contains(err.Error(), "accepted peers: w1") {
		t.Errorf("ConnectWorker of w2 under peers w1 = %v", err)
	}
	w1 := w2
	w1.Identity = "w1"
	conn, err := wool.ConnectWorker(w1, gated)
	if err != nil {
		t.Errorf("ConnectWorker of w1 under peers w1: %v", err)
	} else {
		conn.Close()
	}
	if _, err := creds.WithPeers(" "); !errors.Is(err, wool.ErrInvalidArgument) {
		t.Errorf("WithPeers(\" \") = %v, want ErrInvalidArgument", err)
	}
}

// Given connections, when IdleMany or RetireIdle is asked for 0 or fewer polls in flight, then
// it refuses as C's wool_idle_many and Python's idle_many do: ErrInvalidArgument in every slot
// (IdleMany) or as the error (RetireIdle), nothing polled.
func TestFewerThanOnePollInFlightIsRefused(t *testing.T) {
	t.Parallel()
	conn := connect(t, workertest.StartWorker(t).Address)
	for _, maxInFlight := range []int{0, -1} {
		results := wool.IdleMany(context.Background(), []*wool.Connection{conn, conn}, maxInFlight)
		for i, result := range results {
			if !errors.Is(result.Err, wool.ErrInvalidArgument) {
				t.Errorf("IdleMany(maxInFlight %d) slot %d: %v", maxInFlight, i, result.Err)
			}
		}
		_, err := wool.RetireIdle([]*wool.Connection{conn}, wool.NewRetirePolicy(0), time.Second, maxInFlight)
		if !errors.Is(err, wool.ErrInvalidArgument) {
			t.Errorf("RetireIdle(maxInFlight %d): %v", maxInFlight, err)
		}
	}
	if n := wool.CallsInFlight(conn); n != 0 {
		t.Errorf("calls in flight after refused sweeps: %d", n)
	}
}
