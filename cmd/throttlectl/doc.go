// Command throttlectl shows and steers the state that throttle's Transports
// share in Redis: active penalties, live replicas, how far ahead each rule
// is booked and how much of each calendar quota is used; and it lifts a
// penalty that should not be there.
//
// Usage:
//
//	throttlectl [-redis ADDR|URL] [-prefix PREFIX] [-timeout D] status [-json] [-check] [PROVIDER]
//	throttlectl [-redis ADDR|URL] [-prefix PREFIX] [-timeout D] watch [-n COUNT] [PROVIDER]
//	throttlectl [-redis ADDR|URL] [-prefix PREFIX] [-timeout D] lift [-yes] -provider NAME SCOPE
//
// -redis is "host:port", a URL (redis://user:password@host:port/db, or
// rediss:// for TLS), or several comma-separated addresses (or URLs) of a
// Redis Cluster; a single address of a cluster node is recognised too. The
// default is $THROTTLE_REDIS, else 127.0.0.1:6379. A password may also come
// from $THROTTLE_REDIS_PASSWORD, so that it stays out of the process list.
// -prefix is the Transports' limiter.SharedConfig.Prefix (default "throttle").
// -timeout bounds each Redis call (default 5s).
//
// Exit codes: 0 fine; 1 penalties are active or a replica reports a fault
// (status -check), or a lift was declined or not done because the penalty
// changed since it was shown; 2 a usage error, or the state could not be
// read (wrong address, wrong password, a TLS failure, no keys under the
// prefix, a provider with no state, a bound met so that a penalty may be
// missing), or a lift's key went but the replicas were not told.
package main
