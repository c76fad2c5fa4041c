// Command woolconsumer is a stranger's program using the released Go module: the README's Go
// snippet, with the idle threshold as an argument so that a test can retire a fresh worker.
// scripts/release-test-go.sh copies it into a module of its own outside the repository and
// gets the binding from the release's module proxy tree (prebuilt static libwool, no
// pkg-config, no Rust).
//
//	woolconsumer ADDRESS THRESHOLD
//
// Polls the worker at ADDRESS; when it has been idle at least THRESHOLD (a Go duration, e.g.
// 0s or 5m) stops it with a 30 s grace. Prints the idle time and what it did; exits 1 on any
// error, a skipped poll included (the snippet skips a worker it cannot read).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	wool "github.com/libwool/libwool/bindings/go"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: woolconsumer ADDRESS THRESHOLD")
		os.Exit(2)
	}
	threshold, err := time.ParseDuration(os.Args[2])
	if err == nil {
		err = pollThenRetire(context.Background(), os.Args[1], threshold)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "woolconsumer:", err)
		os.Exit(1)
	}
}

// pollThenRetire is the README's snippet.
func pollThenRetire(ctx context.Context, address string, threshold time.Duration) error {
	fmt.Printf("libwool %s\n", wool.Version())
	conn, err := wool.Connect(address)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	idle, err := conn.Idle(ctx)
	switch {
	case errors.Is(err, wool.ErrIdleUnavailable), errors.Is(err, wool.ErrTransient): // skip it
		return fmt.Errorf("skipped %s: %w", address, err)
	case err != nil:
		return err
	case idle >= threshold:
		fmt.Printf("idle %v >= %v: stopping %s\n", idle, threshold, address)
		stopCtx, cancelStop := context.WithTimeout(context.Background(), 45*time.Second) // > grace
		defer cancelStop()
		if err = conn.Stop(stopCtx, 30*time.Second); err == nil {
			fmt.Println("stopped: the worker drained and answered the stop")
		}
		return err
	}
	fmt.Printf("idle %v < %v: kept %s\n", idle, threshold, address)
	return nil
}
