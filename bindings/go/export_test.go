package wool

// Internals the external tests (package wool_test) look at.

// CallsInFlight reports how many library calls are running on c, counting those whose caller
// gave up on them because its context ended.
func CallsInFlight(c *Connection) int {
	c.handle.mu.Lock()
	defer c.handle.mu.Unlock()
	return c.handle.calls
}

// Freed reports whether c's C handle has been released with wool_free.
func Freed(c *Connection) bool {
	c.handle.mu.Lock()
	defer c.handle.mu.Unlock()
	return c.handle.ptr == nil
}

// FreedProbe returns a function reporting whether c's C handle has been released, which does
// not keep c reachable (for the tests of the cleanup of a forgotten Connection).
func FreedProbe(c *Connection) func() bool {
	h := c.handle
	return func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
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
