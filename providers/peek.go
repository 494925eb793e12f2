package providers

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"strings"

	"github.com/quotaware/throttle/providers/internal/mediatype"
)

// defaultPeekLimit is how much of a body PeekBody reads when asked for no
// particular limit. Every error body the presets know fits in far less; the
// bound keeps a large success body from being buffered twice.
const defaultPeekLimit = 64 << 10

// firstChunk is the first buffer size when the body's length is unknown:
// error bodies are a few hundred bytes, so most responses never grow it.
const firstChunk = 2 << 10

// PeekBody reads up to limit bytes (64 KiB when limit <= 0) of a
// response body that may carry a provider's error, and returns them.
//
// It reads only bodies whose Content-Type is JSON (application/json,
// text/json, anything+json), HTML, text/plain, or missing: providers answer
// errors in these, and a missing type is common on gateway errors. Other
// bodies (files, images, streams), a nil body and http.NoBody are left
// untouched and PeekBody returns nil, nil. So is an answer that says it is
// a file (a Content-Disposition of "attachment" or naming a filename,
// whatever its type): its bytes are a user's, and a file that reads like
// an error document ({"punish":"deny"} sent to a bot, then downloaded)
// would otherwise stop every replica's calls.
//
// After a peek resp.Body reads exactly like the original: the prefix, then
// the rest of the original body, byte for byte. An error the original body
// returned while peeking reaches the caller at the same byte offset, after
// the bytes read before it; PeekBody then also returns it, with the prefix,
// so a classifier may still look at what it has. Closing resp.Body closes the
// original.
//
// The prefix may be cut short (at limit bytes or at an error): classifiers must
// cope with truncated JSON. A body of unknown length, not encoded, is read
// only to the end of its first JSON object: a streamed answer is not held
// back until the limit is reached. The prefix must not be modified:
// resp.Body replays it.
//
// A body sent gzip-encoded (Content-Encoding: gzip, which reaches the
// caller as sent when the caller asked for gzip itself) is returned
// decompressed, as far as the prefix goes; resp.Body still replays the
// bytes as sent.
func PeekBody(resp *http.Response, limit int) ([]byte, error) {
	if limit <= 0 {
		limit = defaultPeekLimit
	}
	p, err := peekBody(resp, limit)
	if p != nil && resp.Header != nil {
		p = decoded(resp.Header.Get("Content-Encoding"), p, limit)
	}
	return p, err
}

// decoded is the peeked prefix p as a classifier reads it: decompressed,
// up to limit bytes, when the body is gzip-encoded.
func decoded(encoding string, p []byte, limit int) []byte {
	switch strings.ToLower(strings.TrimSpace(encoding)) {
	case "gzip", "x-gzip":
	default:
		return p
	}
	zr, err := gzip.NewReader(bytes.NewReader(p))
	if err != nil {
		return nil
	}
	// A prefix cut short ends the stream early: what came before stays.
	out, _ := io.ReadAll(io.LimitReader(zr, int64(limit)))
	return out
}

func peekBody(resp *http.Response, limit int) ([]byte, error) {
	if resp == nil || resp.Body == nil || resp.Body == http.NoBody {
		return nil, nil
	}
	if !mediatype.Peekable(resp.Header.Get("Content-Type")) || isFile(resp.Header) {
		return nil, nil
	}
	if rb, ok := resp.Body.(*replayBody); ok && rb.off == 0 && (rb.err != nil || rb.object || len(rb.prefix) >= limit) {
		// Peeked already (a layer below looked too), and what it holds
		// answers this peek: the whole body, a whole object, or at least
		// limit bytes.
		p := rb.prefix[:min(len(rb.prefix), limit)]
		if rb.err == io.EOF || rb.object || len(rb.prefix) >= limit {
			// A peek of limit bytes stops there, before any error the
			// first, longer peek met after them.
			return p, nil
		}
		return p, rb.err
	}
	n, known := limit, false
	if resp.ContentLength == 0 {
		return nil, nil
	}
	if resp.ContentLength > 0 && resp.ContentLength < int64(limit) {
		n, known = int(resp.ContentLength), true
	}
	start := n
	var end *objectEnd
	var enough func([]byte) bool
	if !known {
		start = firstChunk
		if resp.ContentLength < 0 && (resp.Header == nil || resp.Header.Get("Content-Encoding") == "") {
			end = new(objectEnd)
			enough = end.done
		}
	}
	body := resp.Body
	buf, err := readPrefix(body, n, start, enough)
	resp.Body = &replayBody{prefix: buf, err: err, rc: body, object: end != nil && end.closed}
	if err == io.EOF {
		err = nil
	}
	return buf, err
}

// replayBody hands back the peeked prefix, then whatever the original body
// had left (or the error that cut the peek short).
type replayBody struct {
	prefix []byte
	off    int
	err    error // what the original returned when the peek stopped, if anything
	object bool  // the peek stopped at the end of the body's first JSON object
	rc     io.ReadCloser
}

func (b *replayBody) Read(p []byte) (int, error) {
	if b.off < len(b.prefix) {
		n := copy(p, b.prefix[b.off:])
		b.off += n
		return n, nil
	}
	if len(p) == 0 {
		return 0, nil
	}
	if b.err != nil {
		return 0, b.err
	}
	return b.rc.Read(p)
}

func (b *replayBody) Close() error { return b.rc.Close() }

// readPrefix reads up to n bytes of body, stopping at its first error,
// which it returns, or once enough (when not nil) says what was read
// suffices. The buffer starts at start bytes (at most n) and doubles up to
// n, so that a short body of unknown length costs one small buffer.
func readPrefix(body io.Reader, n, start int, enough func([]byte) bool) ([]byte, error) {
	buf := make([]byte, 0, min(max(start, 1), n))
	var err error
	for len(buf) < n {
		if len(buf) == cap(buf) {
			next := make([]byte, len(buf), min(2*cap(buf), n))
			copy(next, buf)
			buf = next
		}
		var k int
		k, err = body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+k]
		if err != nil || (k > 0 && enough != nil && enough(buf)) {
			break
		}
	}
	return buf, err
}

// objectEnd finds where a body's first JSON object ends as the body is
// read, looking at each byte once: a prefix that holds a whole object, the
// shape of every provider's answer, needs no more, since what follows
// cannot change a verdict. An answer of unknown length may be streamed
// (newline-delimited JSON, a long export sent in chunks), and reading on
// to the limit held the caller's RoundTrip until the stream had sent that
// much or ended, where net/http returns at the headers. (Scanning the
// whole prefix again after each read cost a second of CPU for a 64 KiB
// answer sent a byte at a time.) A body that is not an object is read to
// the limit, as before.
type objectEnd struct {
	seen               int // bytes of the prefix looked at
	depth              int
	started, notObject bool
	inString, escaped  bool
	closed             bool
}

// done reports whether p, the prefix read so far, holds the whole first
// object.
func (o *objectEnd) done(p []byte) bool {
	for ; o.seen < len(p) && !o.notObject && !o.closed; o.seen++ {
		c := p[o.seen]
		switch {
		case !o.started:
			switch c {
			case ' ', '\t', '\r', '\n', 0xEF, 0xBB, 0xBF: // space, a byte order mark
			case '{':
				o.started, o.depth = true, 1
			default:
				o.notObject = true
			}
		case o.inString:
			switch {
			case o.escaped:
				o.escaped = false
			case c == '\\':
				o.escaped = true
			case c == '"':
				o.inString = false
			}
		case c == '"':
			o.inString = true
		case c == '{' || c == '[':
			o.depth++
		case c == '}' || c == ']':
			o.depth--
			o.closed = o.depth == 0
		}
	}
	return o.closed
}

// isFile reports an answer that says it is a file: its Content-Disposition
// is "attachment" or names a filename (a malformed one too: the bytes are
// still not the provider's error).
func isFile(h http.Header) bool {
	cd := strings.ToLower(h.Get("Content-Disposition"))
	return strings.HasPrefix(strings.TrimSpace(cd), "attachment") || strings.Contains(cd, "filename")
}
