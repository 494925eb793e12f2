// Package inspect holds what the shared limiter's state looks like to the
// people on call: the snapshot limiter.Shared.Inspect returns and
// cmd/throttlectl prints. It is internal so that the limiter's public
// surface stays the limiting itself; the snapshot's shape may change with
// the state it describes.
package inspect
