package wool

// Internals the external tests (package wool_test) look at.

// CallsInFlight reports how many calls started on c (a sweep counts once per slot of c) the
// process-wide queue's dispatcher still owes a completion to.
func CallsInFlight(c *Connection) int {
	completions.mu.Lock()
	defer completions.mu.Unlock()
	n := 0
	for _, w := range completions.waiters {
		for _, h := range w.on {
			if h == c.handle {
				n++
			}
		}
	}
	return n
}

// PendingCalls reports how many started calls, on any Connection, the process-wide queue's
// dispatcher still owes a completion to.
func PendingCalls() int {
	completions.mu.Lock()
	defer completions.mu.Unlock()
	return len(completions.waiters)
}

// Freed reports whether c's C handle has been released with wool_free.
func Freed(c *Connection) bool {
	return c.handle.freed.Load()
}

// FreedProbe returns a function reporting whether c's C handle has been released, which does
// not keep c reachable (for the tests of the cleanup of a forgotten Connection).
func FreedProbe(c *Connection) func() bool {
	h := c.handle
	return func() bool { return h.freed.Load() }
}

// CredentialsFreedProbe is FreedProbe for Credentials.
func CredentialsFreedProbe(c *Credentials) func() bool {
	h := c.handle
	return func() bool { return h.freed.Load() }
}

// Crossings reports how many wool_idle_start_batch calls the binding has made so far, and how
// many idle polls they started in all.
func Crossings() (crossings, polls uint64) {
	completions.mu.Lock()
	defer completions.mu.Unlock()
	return completions.crossings, completions.batched
}
