package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/providers/dingtalk"
	"github.com/quotaware/throttle/providers/dingtalk/dingtalktest"
)

// ops is where the dashboard and the alert rules live, from this module.
const ops = "../../ops"

// scrape drives the library so that every metric it records has a point
// (paced, throttled and penalised calls, a calendar quota, a request no
// profile matched, a token no replica learned, token exchanges the fleet
// shares through Redis, a refused token replaced) and returns the names of the series Prometheus
// would scrape. The Transport runs on a redis-server of its own, as in
// production.
func scrape(t *testing.T) map[string]bool {
	rdb := redistest.Start(t).Client(t)
	registry := prometheus.NewRegistry()
	mp, err := meterProvider(registry)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	// The emulator allows 10/s where the preset assumes 20/s: quota errors
	// and penalties follow.
	emu := dingtalktest.New(dingtalktest.Options{DefaultApp: "dingprom", QPS: 10})
	t.Cleanup(emu.Close)
	tr, err := throttle.New(
		throttle.WithBase(offline{emu: http.DefaultTransport}),
		throttle.WithRedis(rdb),
		throttle.WithMeterProvider(mp),
		throttle.WithApps(apps.Config{Key: []byte("kit-hashing-key-of-32-bytes-long")}), // its counters go to the Transport's meter provider
		throttle.WithProfiles(dingtalk.MustNew(dingtalk.Config{Hosts: []string{emu.Host()}, Apps: []dingtalk.App{{AppKey: "dingprom"}}, Default: "dingprom"}).Profile()),
		throttle.WithMaxWait(100*time.Millisecond),
		throttle.WithLogger(slog.New(slog.DiscardHandler)),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	c := &http.Client{Transport: tr}
	// Token exchanges of one credential, before the load can penalise the
	// host: the first fetched from the provider, the second answered from
	// Redis. DingTalk then revokes the token: the call refused with it
	// heals the fleet's, the next exchange fetches anew, and the SDK's next
	// call with the revoked token goes with the new one (replaced).
	exchange := func() string {
		resp, err := c.Get(emu.URL + "/gettoken?appkey=dingprom&appsecret=kit-secret")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var a struct {
			AccessToken string `json:"access_token"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || a.AccessToken == "" {
			t.Fatalf("gettoken: %+v, %v", a, err)
		}
		return a.AccessToken
	}
	call := func(tok string) {
		resp, err := c.Get(emu.URL + "/user/get?userid=u1&access_token=" + url.QueryEscape(tok))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	old := exchange()
	exchange()
	// The emulator answers an unknown token as its default app's: the
	// refusal is injected.
	emu.Revoke(old)
	emu.FailNext(1, http.StatusOK, `{"errcode":40014,"errmsg":"不合法的access_token"}`)
	call(old)
	exchange()
	call(old)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	drive(ctx, c, emu.URL, 40)
	// A token no replica learned, and a host no profile matched.
	for _, u := range []string{emu.URL + "/v1.0/contact/users/me", "https://api.dingtalk.com/v1.0/contact/users/me"} {
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		req.Header.Set("x-acs-dingtalk-access-token", "a-token-nobody-fetched")
		if resp, err := c.Do(req); err == nil {
			resp.Body.Close()
		}
	}

	srv := httptest.NewServer(promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	names := make(map[string]bool)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		names[name] = true
	}
	return names
}

// offline answers requests to the real provider hosts itself (a stand-in
// for a host no profile matched) and sends the rest to the emulator.
type offline struct{ emu http.RoundTripper }

func (o offline) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.HasSuffix(req.URL.Hostname(), "dingtalk.com") {
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("{}")), Request: req}, nil
	}
	return o.emu.RoundTrip(req)
}

var seriesName = regexp.MustCompile(`\bthrottle_[a-z_]+\b`)

// The dashboard, the alert rules and their tests name only series the
// library really exports through the OpenTelemetry Prometheus exporter.
func TestOpsFilesNameExportedSeries(t *testing.T) {
	exported := scrape(t)
	var have []string
	for n := range exported {
		if strings.HasPrefix(n, "throttle_") {
			have = append(have, n)
		}
	}
	sort.Strings(have)
	t.Logf("exported: %s", strings.Join(have, " "))
	files, _ := filepath.Glob(filepath.Join(ops, "*", "*"))
	if len(files) < 3 {
		t.Fatalf("ops files: %v", files)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		used := seriesName.FindAllString(string(b), -1)
		if len(used) == 0 {
			t.Errorf("%s names no throttle series", f)
		}
		for _, n := range used {
			if !exported[n] {
				t.Errorf("%s uses %s, which the library does not export", f, n)
			}
		}
	}
}

// promtool checks the alert rules and runs their unit tests. CI installs
// promtool (Debian's prometheus package); elsewhere the test says how.
func TestAlertRulesWithPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("THROTTLE_REQUIRE_PROMTOOL") != "" {
			t.Fatal("promtool not found and THROTTLE_REQUIRE_PROMTOOL is set")
		}
		t.Skip("promtool not on PATH: apt-get install prometheus (or download it) to check the alert rules")
	}
	rules := filepath.Join(ops, "prometheus", "throttle-alerts.yml")
	dashboard := dashboardRules(t)
	for _, args := range [][]string{
		{"check", "rules", rules},
		{"test", "rules", filepath.Join(ops, "prometheus", "throttle-alerts_test.yml")},
		{"check", "rules", dashboard},
	} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// dashboardRules writes every query of the Grafana dashboard as a recording
// rule (Grafana's variables replaced by values), so that promtool parses
// them as Prometheus would.
func dashboardRules(t *testing.T) string {
	b, err := os.ReadFile(filepath.Join(ops, "grafana", "throttle.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	vars := strings.NewReplacer("$__rate_interval", "5m", "$provider", ".*")
	var out strings.Builder
	out.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	n := 0
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			n++
			q, _ := json.Marshal(vars.Replace(tg.Expr))
			fmt.Fprintf(&out, "      - record: dashboard:query%d\n        expr: %s\n", n, q)
		}
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
