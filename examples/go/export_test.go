package wool

// Internals the external tests (package wool_test) look at.

// CallsInFlight reports how many library calls are running on c, counting those whose caller
// gave up on them because its context ended.
func CallsInFlight(c *Connection) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

// Freed reports whether c's C handle has been released with wool_free.
func Freed(c *Connection) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ptr == nil
}
