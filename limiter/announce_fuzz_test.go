package limiter

import (
	"strings"
	"testing"

	"github.com/quotaware/throttle/limiter/internal/rulecore"
)

// Any message on the penalty channel parses without a panic; one read as
// a penalty or a lift names a valid group and scope (it is then confirmed
// against Redis), and an oversized one is malformed.
func FuzzParseAnnouncement(f *testing.F) {
	for _, seed := range []string{
		penaltyHeader("dingtalk", "app:k1") + "1767225600000000\n90018",
		"v1 back", "v1 lift\ndingtalk\napp:k1", liftPrefix + "dingtalk\napp:k1", legacyBack,
		"dingtalk\napp:k1\n1767225600000000\n90018", "v2 penalty\na\nb", "v", "v1", "v1 ", "vx penalty\n\n\n",
		"v1 penalty\n\n\n\n", "v1 lift\ng", strings.Repeat("v1 penalty\n", 300),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, msg string) {
		a, ok := parseAnnouncement(msg)
		if !ok {
			return
		}
		if len(msg) > maxAnnouncement {
			t.Fatalf("a %d-byte message was read", len(msg))
		}
		if a.kind == penaltyType || a.kind == liftType {
			if rulecore.CheckKey(a.group) != nil || rulecore.CheckKey(a.scope) != nil {
				t.Fatalf("%q read as %s of group %q scope %q", msg, a.kind, a.group, a.scope)
			}
		}
	})
}

// An earlier release's penalty of a group whose name starts with "v" is
// read as that release wrote it, not as a malformed versioned message;
// versioned ones still read by their header.
func TestAnnouncementOfAGroupStartingWithV(t *testing.T) {
	for _, tc := range []struct {
		msg         string
		kind, group string
		ok          bool
	}{
		{"vendor\napp:k1\n1767225600000000\n90018", penaltyType, "vendor", true},
		{"v2\napp:k1\n1767225600000000\n90018", penaltyType, "v2", true},
		{penaltyHeader("vendor", "app:k1") + "1767225600000000\n90018", penaltyType, "vendor", true},
		{"v9 penalty\nvendor\napp:k1\n1\nx", "", "", true}, // a later version: not ours to read
		{"vendor\napp:k1", "", "", false},
	} {
		a, ok := parseAnnouncement(tc.msg)
		if ok != tc.ok || a.kind != tc.kind || a.group != tc.group {
			t.Errorf("%q: %+v %v, want kind %q group %q ok %v", tc.msg, a, ok, tc.kind, tc.group, tc.ok)
		}
	}
}
