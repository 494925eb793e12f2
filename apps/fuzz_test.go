package apps

import (
	"encoding/hex"
	"strings"
	"testing"
	"time"
)

// FuzzAnnouncement feeds the apps channel's message format and what Redis
// holds for an entry (both written by anyone who can reach the server)
// through their parsers: never a panic, and what is accepted is exactly a
// 128-bit hash, a bounded identity, a lifetime within maxTTL.
func FuzzAnnouncement(f *testing.F) {
	h := strings.Repeat("ab", 16)
	for _, s := range []string{h, h + " 7200000 wechat\x1fwxA\x1f", strings.Repeat("ab", 17), strings.Repeat("ab", 64),
		"zz", "", " ", h[:31] + "g", conflictValue, "dingtalk\x1fsuiteS\x1forg1", "\x1f\x1f", strings.Repeat("x", 5000)} {
		f.Add(s, int64(7200000))
	}
	f.Fuzz(func(t *testing.T, msg string, ttlMS int64) {
		if got, ok := parseAnnouncement(msg); ok {
			if len(msg) > maxAnnouncement || !strings.HasPrefix(msg, hex.EncodeToString(got[:])) &&
				!strings.HasPrefix(strings.ToLower(msg), hex.EncodeToString(got[:])) {
				t.Fatalf("accepted %q as %x", msg, got)
			}
		}
		r := readStored(msg, time.Duration(ttlMS)*time.Millisecond)
		if !r.found {
			return
		}
		if r.ttl <= 0 || r.ttl > maxTTL {
			t.Fatalf("%q: lifetime %v accepted", msg, r.ttl)
		}
		if !r.conflict {
			if checkIdentity(r.app) != nil || formatIdentity(r.app) != msg {
				t.Fatalf("%q read as %+v", msg, r.app)
			}
		}
	})
}
