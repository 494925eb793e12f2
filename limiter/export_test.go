package limiter

// Hooks for the external tests of this package.

// ReserveSHA and CancelSHA identify the scripts' calls.
var (
	ReserveSHA = reserveScript.sha.(string)
	CancelSHA  = cancelScript.sha.(string)
)

// SetOnQueued sets the function called each time a request joins a lane's
// queue; nil removes it.
func SetOnQueued(f func(group string)) {
	if f == nil {
		onQueued.Store(nil)
		return
	}
	onQueued.Store(&f)
}
