package limiter

import (
	"syscall"
	"time"
)

// fineSleep blocks the thread in nanosleep, which wakes within tens of
// microseconds of d.
func fineSleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	_ = syscall.Nanosleep(&ts, nil)
}
