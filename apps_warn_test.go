package throttle_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/providers/wechat"
)

// A preset listing several apps, given to a Transport without WithApps,
// charges every untagged request to one app's quotas: New says so once,
// and says nothing with WithApps or with one app.
func TestSeveralAppsWithoutWithAppsWarns(t *testing.T) {
	two := wechat.MustNew(wechat.Config{Apps: []wechat.App{{AppID: "wxa"}, {AppID: "wxb"}}}).Profile()
	one := wechat.MustNew(wechat.Config{Apps: []wechat.App{{AppID: "wxa"}}}).Profile()
	for name, c := range map[string]struct {
		opts []throttle.Option
		warn bool
	}{
		"two apps":               {[]throttle.Option{throttle.WithProfiles(two)}, true},
		"two apps with WithApps": {[]throttle.Option{throttle.WithProfiles(two), throttle.WithApps(apps.Config{})}, false},
		"one app":                {[]throttle.Option{throttle.WithProfiles(one)}, false},
	} {
		var logs bytes.Buffer
		tr, err := throttle.New(append(c.opts, throttle.WithoutTelemetry(),
			throttle.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		tr.Close()
		if got := strings.Count(logs.String(), "without WithApps"); got != map[bool]int{true: 1, false: 0}[c.warn] {
			t.Errorf("%s: warned %d times: %s", name, got, logs.String())
		}
	}
}
