// Command poll-retire polls Wool workers and retires each one once it has been idle long
// enough: the loop an autoscaler runs to shed capacity nobody is using.
//
// Usage:
//
//	poll-retire [-threshold D] [-interval D] [-grace D] [-timeout D]
//	            [-tls-ca PEM [-tls-cert PEM -tls-key PEM] [-identity NAME]] ADDRESS...
//
// Every -interval it asks each remaining worker how long it has been idle and prints the
// reading. A worker idle for at least -threshold is stopped with -grace (0 cancels in-flight
// work at once, a negative grace waits for it however long) and leaves the loop. A worker
// that is unreachable for now is skipped until the next round; one that cannot say how idle it
// is (it predates the idle RPC) or fails otherwise is given up on. TLS: -tls-ca alone is
// one-way TLS, with -tls-cert and -tls-key mutual TLS.
//
// It exits once no worker is left: status 0 when every worker was retired, 1 when some were
// given up on or it was interrupted, 2 on a usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	wool "github.com/libwool/libwool/bindings/go"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// config is what the flags say.
type config struct {
	threshold, interval, grace, timeout time.Duration
	tlsCA, tlsCert, tlsKey, identity    string
	addresses                           []string
}

func parse(args []string, stderr io.Writer) (config, error) {
	var c config
	flags := flag.NewFlagSet("poll-retire", flag.ContinueOnError)
	flags.SetOutput(stderr)
	flags.Usage = func() {
		fmt.Fprintln(stderr, "usage: poll-retire [flags] ADDRESS...")
		flags.PrintDefaults()
	}
	flags.DurationVar(&c.threshold, "threshold", 30*time.Second, "retire a worker once it has been idle this long")
	flags.DurationVar(&c.interval, "interval", time.Second, "time between polling rounds")
	flags.DurationVar(&c.grace, "grace", 0, "how long a retired worker's in-flight tasks may run (negative: however long)")
	flags.DurationVar(&c.timeout, "timeout", 5*time.Second, "deadline of each idle call (a stop gets grace + timeout)")
	flags.StringVar(&c.tlsCA, "tls-ca", "", "CA certificate (PEM file) the workers' certificates chain to")
	flags.StringVar(&c.tlsCert, "tls-cert", "", "client certificate (PEM file), for mutual TLS")
	flags.StringVar(&c.tlsKey, "tls-key", "", "client private key (PEM file), for mutual TLS")
	flags.StringVar(&c.identity, "identity", "", "name to verify the workers' certificates against (default: the dialed host)")
	if err := flags.Parse(args); err != nil {
		return c, err
	}
	c.addresses = flags.Args()
	switch {
	case len(c.addresses) == 0:
		flags.Usage()
		return c, errors.New("no worker addresses")
	case c.threshold < 0 || c.interval <= 0 || c.timeout <= 0:
		return c, errors.New("-threshold must be >= 0, -interval and -timeout > 0")
	case (c.tlsCert == "") != (c.tlsKey == "") || (c.tlsCert != "" && c.tlsCA == ""):
		return c, errors.New("-tls-cert and -tls-key go together, and need -tls-ca")
	}
	return c, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parse(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "poll-retire:", err)
		}
		return 2
	}
	workers, err := connectAll(cfg)
	if err != nil {
		fmt.Fprintln(stderr, "poll-retire:", err)
		return 2
	}
	defer func() {
		for _, w := range workers {
			w.Close()
		}
	}()
	fmt.Fprintf(stdout, "poll-retire: %d workers, threshold %v, interval %v, grace %v\n",
		len(workers), cfg.threshold, cfg.interval, describeGrace(cfg.grace))

	p := poller{cfg: cfg, out: stdout}
	for remaining := workers; len(remaining) > 0; {
		remaining = p.round(ctx, remaining)
		if len(remaining) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(stdout, "interrupted with %d workers left\n", len(remaining))
			return 1
		case <-time.After(cfg.interval):
		}
	}
	fmt.Fprintf(stdout, "done: %d retired, %d given up on\n", p.retired, p.givenUp)
	if p.givenUp > 0 {
		return 1
	}
	return 0
}

// connectAll makes one Connection per address (no I/O yet), with TLS if the flags ask for it.
func connectAll(cfg config) ([]*wool.Connection, error) {
	var opts []wool.Option
	if cfg.tlsCA != "" {
		mutual := cfg.tlsCert != ""
		credentials, err := wool.CredentialsFromFiles(cfg.tlsCA, cfg.tlsKey, cfg.tlsCert, mutual, cfg.identity)
		if err != nil {
			return nil, err
		}
		defer credentials.Close() // each Connection keeps its own copy
		opts = append(opts, wool.WithCredentials(credentials))
	}
	var workers []*wool.Connection
	for _, address := range cfg.addresses {
		conn, err := wool.Connect(address, opts...)
		if err != nil {
			for _, w := range workers {
				w.Close()
			}
			return nil, err
		}
		workers = append(workers, conn)
	}
	return workers, nil
}

// poller runs polling rounds and counts the outcomes.
type poller struct {
	cfg              config
	out              io.Writer
	retired, givenUp int
}

// round polls each worker once, retires the idle ones, and returns those still to watch.
func (p *poller) round(ctx context.Context, workers []*wool.Connection) []*wool.Connection {
	var remaining []*wool.Connection
	for _, w := range workers {
		if ctx.Err() != nil {
			return append(remaining, w)
		}
		if p.keep(ctx, w) {
			remaining = append(remaining, w)
		} else {
			w.Close()
		}
	}
	return remaining
}

// keep polls one worker, retires it if it is idle enough, and says whether to keep watching it.
func (p *poller) keep(ctx context.Context, w *wool.Connection) bool {
	pollCtx, cancel := context.WithTimeout(ctx, p.cfg.timeout)
	idle, err := w.Idle(pollCtx)
	cancel()
	switch {
	case ctx.Err() != nil:
		return true
	case errors.Is(err, wool.ErrTransient):
		p.say(w, "unreachable for now, skipped: %v", err)
		return true
	case errors.Is(err, wool.ErrIdleUnavailable):
		p.say(w, "cannot report idle time (it predates the idle RPC): given up on")
		p.givenUp++
		return false
	case err != nil:
		p.say(w, "given up on: %v", err)
		p.givenUp++
		return false
	case idle < p.cfg.threshold:
		p.say(w, "idle %v", round(idle))
		return true
	}
	p.say(w, "idle %v >= %v: retiring with grace %v", round(idle), p.cfg.threshold, describeGrace(p.cfg.grace))
	return !p.retire(ctx, w)
}

// retire stops one worker and says whether it leaves the loop (retired, or given up on).
func (p *poller) retire(ctx context.Context, w *wool.Connection) bool {
	stopCtx, cancel := ctx, context.CancelFunc(func() {})
	if p.cfg.grace >= 0 { // the deadline must outlast the grace to see the answer
		stopCtx, cancel = context.WithTimeout(ctx, p.cfg.grace+p.cfg.timeout)
	}
	err := w.Stop(stopCtx, p.cfg.grace)
	cancel()
	switch {
	case err == nil:
		p.say(w, "retired")
		p.retired++
		return true
	case errors.Is(err, wool.ErrTransient) || ctx.Err() != nil:
		p.say(w, "stop did not complete, will retry: %v", err)
		return false
	default:
		p.say(w, "stop failed, given up on: %v", err)
		p.givenUp++
		return true
	}
}

func (p *poller) say(w *wool.Connection, format string, args ...any) {
	fmt.Fprintf(p.out, "%-21s %s\n", w.Target(), fmt.Sprintf(format, args...))
}

func round(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

func describeGrace(grace time.Duration) string {
	if grace < 0 {
		return "forever"
	}
	return grace.String()
}
