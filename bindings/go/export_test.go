package wool

// Internals the external tests (package wool_test) look at.

// CallsInFlight reports how many calls started on c have not had their completion collected.
func CallsInFlight(c *Connection) int {
	return int(c.handle.inFlight.Load())
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
	c.handle.mu.RLock()
	defer c.handle.mu.RUnlock()
	return c.handle.ptr == nil
}

// FreedProbe returns a function reporting whether c's C handle has been released, which does
// not keep c reachable (for the tests of the cleanup of a forgotten Connection).
func FreedProbe(c *Connection) func() bool {
	h := c.handle
	return func() bool {
		h.mu.RLock()
		defer h.mu.RUnlock()
		return h.ptr == nil
	}
}

// CredentialsFreedProbe is FreedProbe for Credentials.
func CredentialsFreedProbe(c *Credentials) func() bool {
	h := c.handle
	return func() bool {
		h.mu.RLock()
		defer h.mu.RUnlock()
		return h.ptr == nil
	}
}
