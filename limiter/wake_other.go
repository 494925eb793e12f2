//go:build !linux

package limiter

import "time"

// fineSleep falls back to the runtime's timer where no nanosleep is
// wired: the waker is then no finer than a timer, and never early.
func fineSleep(d time.Duration) { time.Sleep(d) }
