// Package redisproc starts a private redis-server on a free loopback port for
// the comparison program, and stops it when asked.
package redisproc
