package wool_test

// Calls on the library's completion queue: cancellation, deadlines, Close with calls in
// flight, many goroutines on few OS threads, and IdleMany. A frozen worker (SIGSTOP through
// workertest's Freeze) keeps its sockets open and answers nothing, so calls to it stay in
// flight until their context ends or it is thawed.

import (
	"context"
	"errors"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	wool "github.com/libwool/libwool/bindings/go"
	"github.com/libwool/libwool/bindings/go/internal/workertest"
)

// osThreads returns the process's OS thread count (Threads: in /proc/self/status).
func osThreads(t testing.TB) int {
	t.Helper()
	n, err := readThreads()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func readThreads() (int, error) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if value, ok := strings.CutPrefix(line, "Threads:"); ok {
			return strconv.Atoi(strings.TrimSpace(value))
		}
	}
	return 0, errors.New("no Threads: line in /proc/self/status")
}

// threadSampler records the most OS threads seen, sampling every millisecond until stopped.
type threadSampler struct {
	most atomic.Int64
	stop chan struct{}
	done chan struct{}
}

func sampleThreads(t testing.TB) *threadSampler {
	s := &threadSampler{stop: make(chan struct{}), done: make(chan struct{})}
	s.most.Store(int64(osThreads(t)))
	go func() {
		defer close(s.done)
		ticker := time.NewTicker(time.Millisecond)
		defer ticker.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-ticker.C:
				if n, err := readThreads(); err == nil && int64(n) > s.most.Load() {
					s.most.Store(int64(n))
				}
			}
		}
	}()
	return s
}

// Most stops the sampler and returns the most threads it saw.
func (s *threadSampler) Most() int {
	close(s.stop)
	<-s.done
	return int(s.most.Load())
}

// frozenWorker starts a wool-worker, connects to it, polls it once (so the connection is up)
// and freezes it.
func frozenWorker(t *testing.T) (*workertest.Process, *wool.Connection) {
	t.Helper()
	worker := workertest.StartWorker(t)
	conn := connect(t, worker.Address)
	mustIdle(t, conn)
	worker.Freeze(t)
	return worker, conn
}

// Given a frozen worker, when a poll without deadline is cancelled mid-call, then Idle returns
// promptly with context.Canceled (not a worker fault), the call is over in the library too
// (nothing in flight), Close frees the handle at once, and after a thaw a new connection to the
// worker polls it fine.
func TestCancellationReturnsPromptly(t *testing.T) {
	t.Parallel()
	worker, conn := frozenWorker(t)

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	_, err := conn.Idle(ctx)
	took := time.Since(start)

	if took < 150*time.Millisecond || took > 200*time.Millisecond+prompt {
		t.Errorf("Idle returned after %v, cancelled at 200ms", took)
	}
	if !errors.Is(err, context.Canceled) || errors.Is(err, wool.ErrTransient) {
		t.Fatalf("want context.Canceled and no worker-fault kind, got %v", err)
	}
	var werr *wool.Error
	if errors.As(err, &werr) {
		t.Errorf("a cancellation is the context's error, not an *Error: %#v", werr)
	}
	if n := wool.CallsInFlight(conn); n != 0 {
		t.Fatalf("calls in flight after the cancelled call returned: %d, want 0", n)
	}
	conn.Close()
	if !wool.Freed(conn) {
		t.Fatal("Close did not free the handle")
	}
	worker.Thaw(t)
	mustIdle(t, connect(t, worker.Address))
}

// Given a frozen worker, when a poll's context has a 200 ms deadline, then Idle returns about
// then with an error matching ErrTransient (gRPC code 4) and context.DeadlineExceeded, and
// nothing is left in flight.
func TestDeadlineAgainstAFrozenWorker(t *testing.T) {
	t.Parallel()
	_, conn := frozenWorker(t)

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := conn.Idle(ctx)
	took := time.Since(start)

	if took < 150*time.Millisecond || took > 200*time.Millisecond+prompt {
		t.Errorf("Idle returned after %v with a 200 ms deadline", took)
	}
	werr := requireKind(t, err, wool.ErrTransient)
	if werr.Code != 4 || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("want gRPC code 4 (DEADLINE_EXCEEDED) matching context.DeadlineExceeded, got %v", err)
	}
	if n := wool.CallsInFlight(conn); n != 0 {
		t.Errorf("calls in flight after the call returned: %d, want 0", n)
	}
}

// Given a wool-worker with a task in flight, when a Stop with GraceForever (which waits for
// the task) is cancelled, then Stop returns promptly with context.Canceled and nothing is left
// in flight.
func TestCancellingAStopReturnsPromptly(t *testing.T) {
	t.Parallel()
	worker := workertest.StartWorker(t)
	conn := connect(t, worker.Address)
	workertest.StartDispatch(t, worker.Address, "echo", []byte("hello"))

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	start := time.Now()
	err := conn.Stop(ctx, wool.GraceForever)
	took := time.Since(start)

	if took < 250*time.Millisecond || took > 300*time.Millisecond+prompt {
		t.Errorf("Stop returned after %v, cancelled at 300ms", took)
	}
	if !errors.Is(err, context.Canceled) || errors.Is(err, wool.ErrTransient) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
	if n := wool.CallsInFlight(conn); n != 0 {
		t.Errorf("calls in flight after the cancelled Stop returned: %d, want 0", n)
	}
}

// Given 50 polls in flight on one Connection to a frozen worker, when the Connection is
// closed, then Close returns at once and frees the handle, later calls fail with ErrClosed,
// and once the worker is thawed every poll in flight completes normally (the library keeps
// what they need); nothing stays in flight.
func TestCloseWhileCallsAreInFlight(t *testing.T) {
	t.Parallel()
	worker, conn := frozenWorker(t)

	const n = 50
	results := make(chan error, n)
	for range n {
		go func() {
			_, err := idle(conn)
			results <- err
		}()
	}
	eventually(t, "all polls in flight", 60*time.Second, func() bool { return wool.CallsInFlight(conn) == n })

	start := time.Now()
	conn.Close()
	if took := time.Since(start); took > prompt {
		t.Errorf("Close took %v with calls in flight", took)
	}
	if !wool.Freed(conn) {
		t.Error("Close did not free the handle")
	}
	if _, err := idle(conn); !errors.Is(err, wool.ErrClosed) {
		t.Errorf("Idle after Close: want ErrClosed, got %v", err)
	}
	worker.Thaw(t)
	for range n {
		select {
		case err := <-results:
			if err != nil {
				t.Errorf("a poll in flight when its Connection was closed: %v", err)
			}
		case <-time.After(2 * callTimeout):
			t.Fatal("a poll in flight when its Connection was closed never returned")
		}
	}
	if left := wool.CallsInFlight(conn); left != 0 {
		t.Errorf("calls in flight after all returned: %d", left)
	}
}

// Given one Connection to a frozen worker, when 10,000 goroutines poll through it at once,
// then all 10,000 polls are in flight together on a small number of OS threads (each waiting
// goroutine holds none; the old blocking calls held one each), and once the worker is thawed
// every poll succeeds and no goroutine is left behind. Not parallel: the thread and goroutine
// counts are the process's.
func TestTenThousandGoroutinesPollOneConnection(t *testing.T) {
	worker, conn := frozenWorker(t)
	const n, mostThreads = 10000, 100
	goroutinesBefore := runtime.NumGoroutine()
	threadsBefore := osThreads(t)
	sampler := sampleThreads(t)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := make(chan struct{})
	var failed atomic.Int64
	var firstError sync.Once
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if _, err := conn.Idle(ctx); err != nil {
				failed.Add(1)
				firstError.Do(func() { t.Errorf("a poll failed: %v", err) })
			}
		}()
	}
	began := time.Now()
	close(start)
	eventually(t, "all 10,000 polls in flight", time.Minute, func() bool { return wool.CallsInFlight(conn) == n })
	threadsInFlight := osThreads(t)
	t.Logf("10,000 polls in flight after %v on %d OS threads", time.Since(began).Round(time.Millisecond), threadsInFlight)
	worker.Thaw(t)
	wg.Wait()
	elapsed := time.Since(began)
	most := sampler.Most()
	threadsAfter := osThreads(t)

	t.Logf("OS threads: %d before, %d with all polls in flight, at most %d, %d after; %d polls in %v",
		threadsBefore, threadsInFlight, most, threadsAfter, n, elapsed.Round(time.Millisecond))
	if failed.Load() != 0 {
		t.Fatalf("%d of %d polls failed", failed.Load(), n)
	}
	if most >= mostThreads {
		t.Errorf("up to %d OS threads for %d goroutines polling, want fewer than %d", most, n, mostThreads)
	}
	if left := wool.CallsInFlight(conn); left != 0 {
		t.Errorf("calls in flight after all returned: %d", left)
	}
	eventually(t, "the pollers' goroutines are gone", 60*time.Second, func() bool {
		return runtime.NumGoroutine() <= goroutinesBefore
	})
}

// Given a frozen worker, when a storm of 2,000 polls is cancelled mid-call, then each returns
// context.Canceled, and what they used is freed as they return: no call is left in flight in
// the library nor awaited by the dispatcher, no goroutine is left behind, OS threads stay few;
// and after a thaw the same Connection polls again (at worst after one transient failure). This
// replaces the cap on blocked calls (MaxBlockingCalls) a storm of abandoned calls once needed.
// Not parallel: the counts are the process's.
func TestCancelledCallsFreeTheirResources(t *testing.T) {
	worker, conn := frozenWorker(t)
	const storm, mostThreads = 2000, 100
	goroutinesBefore := runtime.NumGoroutine()
	sampler := sampleThreads(t)

	var wg sync.WaitGroup
	for i := range storm {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(time.Duration(1+i%50)*time.Millisecond, cancel)
			if _, err := conn.Idle(ctx); !errors.Is(err, context.Canceled) {
				t.Errorf("want context.Canceled, got %v", err)
			}
		}()
	}
	wg.Wait()
	most := sampler.Most()

	if n := wool.CallsInFlight(conn); n != 0 {
		t.Errorf("calls in flight after every cancelled call returned: %d, want 0", n)
	}
	if n := wool.PendingCalls(); n != 0 {
		t.Errorf("completions the dispatcher still awaits: %d, want 0", n)
	}
	if most >= mostThreads {
		t.Errorf("up to %d OS threads during the storm, want fewer than %d", most, mostThreads)
	}
	t.Logf("%d cancelled polls, at most %d OS threads", storm, most)
	eventually(t, "the storm's goroutines are gone", 60*time.Second, func() bool {
		return runtime.NumGoroutine() <= goroutinesBefore
	})
	worker.Thaw(t)
	// The worker now reads the resets of the streams that had reached it; h2's defence against
	// rapid resets (CVE-2023-44487) may then end the connection (GOAWAY "too_many_resets"),
	// failing a poll as ErrTransient. The next one dials anew.
	eventually(t, "a poll through the same Connection succeeds", 60*time.Second, func() bool {
		_, err := idle(conn)
		if err != nil {
			requireKind(t, err, wool.ErrTransient)
		}
		return err == nil
	})
}

// Given three wool-workers, a server that never answers, a closed Connection and a nil one,
// when IdleMany polls them all (one worker twice) with 2 in flight and a 1 s deadline, then
// each slot holds its own outcome: readings for the workers, ErrTransient matching
// context.DeadlineExceeded for the silent server, ErrClosed, ErrInvalidArgument; within about
// the deadline, with nothing left in flight.
func TestIdleManyPollsAFleet(t *testing.T) {
	t.Parallel()
	var workers []*wool.Connection
	for range 3 {
		workers = append(workers, connect(t, workertest.StartWorker(t).Address))
	}
	silent := connect(t, workertest.StartHoldServer(t).Address())
	closed := connect(t, "127.0.0.1:9")
	closed.Close()
	conns := []*wool.Connection{workers[0], silent, workers[1], closed, nil, workers[2], workers[0]}

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	results := wool.IdleMany(ctx, conns, 2)
	took := time.Since(start)

	if len(results) != len(conns) {
		t.Fatalf("%d results for %d connections", len(results), len(conns))
	}
	if took > time.Second+prompt {
		t.Errorf("IdleMany took %v with a 1 s deadline", took)
	}
	for _, i := range []int{0, 2, 5, 6} {
		if r := results[i]; r.Err != nil || r.Idle <= 0 {
			t.Errorf("slot %d (a worker): %v, %v; want a positive reading", i, r.Idle, r.Err)
		}
	}
	if err := results[1].Err; !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("slot 1 (silent): want context.DeadlineExceeded, got %v", err)
	} else {
		requireKind(t, err, wool.ErrTransient)
		// The library's message for this worker, not one made up by the binding.
		var slot *wool.Error
		if !errors.As(err, &slot) || !strings.HasPrefix(slot.Message, "wool_idle: ") {
			t.Errorf("slot 1 (silent): want the library's message for the worker, got %v", err)
		}
	}
	if err := results[3].Err; !errors.Is(err, wool.ErrClosed) {
		t.Errorf("slot 3 (closed): want ErrClosed, got %v", err)
	}
	requireKind(t, results[4].Err, wool.ErrInvalidArgument)
	for _, conn := range append(workers, silent) {
		if n := wool.CallsInFlight(conn); n != 0 {
			t.Errorf("%s: calls in flight after IdleMany returned: %d", conn.Target(), n)
		}
	}
	if empty := wool.IdleMany(ctx, nil, 4); len(empty) != 0 {
		t.Errorf("IdleMany of no connections: %v", empty)
	}
}

// Given 20 polls of a frozen worker, 4 at a time, when IdleMany's context is cancelled, then
// it returns promptly, every slot holding context.Canceled (in flight, cancelled, or never
// started), with nothing left in flight.
func TestIdleManyIsCancelledWithItsContext(t *testing.T) {
	t.Parallel()
	_, conn := frozenWorker(t)
	conns := make([]*wool.Connection, 20)
	for i := range conns {
		conns[i] = conn
	}

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	results := wool.IdleMany(ctx, conns, 4)
	if took := time.Since(start); took > 200*time.Millisecond+prompt {
		t.Errorf("IdleMany returned %v after being cancelled at 200ms", took)
	}
	for i, r := range results {
		if !errors.Is(r.Err, context.Canceled) {
			t.Errorf("slot %d: want context.Canceled, got %v", i, r.Err)
		}
	}
	if n := wool.CallsInFlight(conn); n != 0 {
		t.Errorf("calls in flight after IdleMany returned: %d", n)
	}
}

// An *Error with StatusCancelled (a cancellation not caused by the caller's context, which the
// binding never expects) matches context.Canceled and no worker-fault kind.
func TestStatusCancelledMatchesContextCanceled(t *testing.T) {
	t.Parallel()
	err := &wool.Error{Op: "idle", Status: wool.StatusCancelled, Code: 1, Message: "cancelled"}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("%v does not match context.Canceled", err)
	}
	for _, kind := range []error{wool.ErrInvalidArgument, wool.ErrIdleUnavailable, wool.ErrTransient,
		wool.ErrHandshake, wool.ErrRPC, wool.ErrPanic} {
		if errors.Is(err, kind) {
			t.Errorf("%v matches %v", err, kind)
		}
	}
}

// Given 32 goroutines polling one Connection in a loop, when another goroutine closes it (and
// then closes it again), then every poll ends with its answer or ErrClosed, each goroutine's
// first call after the close is ErrClosed, nothing crashes or hangs, and -race sees no race:
// the library owns the handle's lifetime, the binding keeps only whether it closed it.
func TestClosingWhilePollingFromManyGoroutines(t *testing.T) {
	t.Parallel()
	worker := workertest.StartWorker(t)
	conn := connect(t, worker.Address)
	const pollers = 32
	var started sync.WaitGroup
	started.Add(pollers)
	var answered atomic.Int64
	errs := make(chan error, pollers)
	for range pollers {
		go func() {
			first := true
			for {
				_, err := idle(conn)
				if first {
					started.Done()
					first = false
				}
				switch {
				case err == nil:
					answered.Add(1)
				case errors.Is(err, wool.ErrClosed):
					errs <- nil
					return
				default:
					errs <- err
					return
				}
			}
		}()
	}
	started.Wait()
	conn.Close()
	conn.Close()
	for range pollers {
		select {
		case err := <-errs:
			if err != nil {
				t.Errorf("a poll ended with %v, want its answer or ErrClosed", err)
			}
		case <-time.After(2 * callTimeout):
			t.Fatal("a goroutine polling the closed Connection never saw ErrClosed")
		}
	}
	if !wool.Freed(conn) {
		t.Error("Close did not free the handle")
	}
	if n := wool.CallsInFlight(conn); n != 0 {
		t.Errorf("calls in flight after every poller returned: %d", n)
	}
	t.Logf("%d polls answered before the close", answered.Load())
}

// Given 512 goroutines released at once to poll one live worker, then every poll succeeds and
// the polls were started in fewer crossings into the library than there were polls (the
// goroutines arriving during a crossing are started together by the next one).
func TestPollsStartedTogetherShareCrossings(t *testing.T) {
	worker := workertest.StartWorker(t)
	conn := connect(t, worker.Address)
	mustIdle(t, conn)
	const pollers = 512
	crossingsBefore, polledBefore := wool.Crossings()

	release := make(chan struct{})
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range pollers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-release
			if _, err := idle(conn); err != nil {
				if failed.Add(1) == 1 {
					t.Errorf("a poll of the burst failed: %v", err)
				}
			}
		}()
	}
	close(release)
	wg.Wait()

	crossings, polled := wool.Crossings()
	crossings, polled = crossings-crossingsBefore, polled-polledBefore
	if polled < pollers {
		t.Errorf("the crossings carried %d polls, want at least the %d of the burst", polled, pollers)
	}
	if crossings >= polled {
		t.Errorf("%d polls took %d crossings: none was shared", polled, crossings)
	}
	if n := wool.PendingCalls(); n != 0 {
		t.Errorf("completions the dispatcher still awaits: %d, want 0", n)
	}
	t.Logf("%d polls in %d crossings", polled, crossings)
}

// Given polls started together toward a live worker and a frozen one, when the contexts of the
// frozen worker's polls are cancelled while their batches are being gathered, crossed or are
// in flight (0 to 4 ms after the start), then each of those returns context.Canceled, every
// poll of the live worker in the same batches succeeds, and nothing is left in flight.
func TestCancellingOnePollOfABatchCancelsOnlyIt(t *testing.T) {
	_, frozen := frozenWorker(t)
	worker := workertest.StartWorker(t)
	live := connect(t, worker.Address)
	mustIdle(t, live)
	const pollers = 600

	release := make(chan struct{})
	var wg sync.WaitGroup
	var cancelled, answered atomic.Int64
	for i := range pollers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-release
			if i%2 == 1 {
				if _, err := idle(live); err != nil {
					t.Errorf("a live worker's poll beside cancelled ones failed: %v", err)
					return
				}
				answered.Add(1)
				return
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			time.AfterFunc(time.Duration(i%5)*time.Millisecond, cancel)
			_, err := frozen.Idle(ctx)
			if !errors.Is(err, context.Canceled) {
				t.Errorf("want context.Canceled for a cancelled poll, got %v", err)
				return
			}
			cancelled.Add(1)
		}()
	}
	close(release)
	wg.Wait()

	if got := answered.Load(); got != pollers/2 {
		t.Errorf("%d live polls answered, want %d", got, pollers/2)
	}
	if got := cancelled.Load(); got != pollers/2 {
		t.Errorf("%d polls cancelled, want %d", got, pollers/2)
	}
	if n := wool.CallsInFlight(frozen); n != 0 {
		t.Errorf("calls in flight on the frozen worker after every cancelled poll returned: %d", n)
	}
	if n := wool.PendingCalls(); n != 0 {
		t.Errorf("completions the dispatcher still awaits: %d, want 0", n)
	}
}
