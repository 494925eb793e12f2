package providers

import (
	"io"
	"math"
	"net/http"
)

// PeekRequestBody reads up to limit bytes of a request body for a Route
// whose provider names a limited entity in the body (a chat, a user), and
// reports whether they are the whole body.
//
// Afterwards the request is as it was for everyone else: req.Body reads the
// same bytes (the prefix, then the rest of the original, or the error the
// original returned, at the same offset), closing it closes the original,
// and GetBody and ContentLength are untouched, so a retry rewinds as before.
// At most limit+1 bytes are read, however long the body.
//
// complete is false when the body is longer than limit or could not be
// read. The prefix is then cut short (at limit, or where the body failed):
// a route may still find what it looks for there, as JSON members written
// first are, and must otherwise fall back to its coarser scope rather than
// fail the request. The prefix must not be modified: req.Body replays it.
func PeekRequestBody(req *http.Request, limit int) (prefix []byte, complete bool) {
	if req == nil || req.Body == nil || req.Body == http.NoBody {
		return nil, true
	}
	if limit <= 0 {
		return nil, false
	}
	// limit+1 must not overflow: MaxInt is "no limit", not a panic.
	limit = min(limit, math.MaxInt-1)
	// One byte more than limit tells a body of exactly limit from a longer
	// one. A ContentLength of 0 with a body means unknown.
	size := limit + 1
	if req.ContentLength > 0 && req.ContentLength < int64(limit) {
		size = int(req.ContentLength) + 1
	}
	body := req.Body
	buf, err := readPrefix(body, size, firstChunk, nil)
	req.Body = &replayBody{prefix: buf, err: err, rc: body}
	if err != io.EOF || len(buf) > limit {
		return buf[:min(len(buf), limit)], false
	}
	return buf, true
}
