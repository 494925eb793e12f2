// Package sdktest holds what the integration tests share: the stand-in for
// the network between an SDK's real hosts and a provider emulator, and a
// small load driver.
package sdktest
