package throttle

// OnProbeWait has f called each time a request starts waiting for another
// request's probe of a scope, until the test ends.
func OnProbeWait(t interface{ Cleanup(func()) }, f func()) {
	onProbeWait.Store(&f)
	t.Cleanup(func() { onProbeWait.Store(nil) })
}
