package main_test

// The tool as the person on call runs it: built with go build, run as a
// subprocess against a real redis-server that three Transports with the
// DingTalk preset share, while they call the DingTalk emulator. Every
// figure it prints is checked against what the emulator recorded.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotaware/throttle/limiter/inspect"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/providers/dingtalk"
	"github.com/quotaware/throttle/providers/dingtalk/dingtalktest"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// tool is the throttlectl binary, built once for the package.
var tool string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "throttlectl")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tool = filepath.Join(dir, "throttlectl")
	if out, err := exec.Command("go", "build", "-o", tool, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// ctl runs the tool with stdin and returns its stdout, stderr and exit code.
func ctl(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return ctlEnv(t, nil, stdin, args...)
}

// ctlEnv is ctl with extra environment variables.
func ctlEnv(t *testing.T, env []string, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, tool, args...)
	cmd.Env = append(append(os.Environ(), "THROTTLE_REDIS=", "THROTTLE_REDIS_PASSWORD="), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("running %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// liftLog records when a replica logs that it heard a lift.
type liftLog struct {
	mu     sync.Mutex
	heard  []time.Time
	signal chan struct{}
}

func (h *liftLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *liftLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *liftLog) WithGroup(string) slog.Handler            { return h }
func (h *liftLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "throttle: penalty lifted, scope called again" {
		h.mu.Lock()
		h.heard = append(h.heard, r.Time)
		h.mu.Unlock()
		h.signal <- struct{}{}
	}
	return nil
}

const (
	metered   = "/v1.0/contact/users/manager4220" // metered: counts against the month's quota
	unmetered = "/v1.0/robot/oToMessages/batchSend"
	prefix    = "ops"
	quotaBody = `{"code":"Forbidden.AccessDenied.ApiCountLimitForOrg","message":"The number of API calls of the organization has exceeded the monthly limit.","requestid":"x"}`
)

// call sends one GET through client; it returns the HTTP status, or the
// Transport's error.
func call(t *testing.T, client *http.Client, emu *dingtalktest.Server, path string) (int, error) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, emu.URL+path, nil)
	req.Header.Set("x-acs-dingtalk-access-token", "tok")
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

func TestStatusAndLiftOnThreeReplicas(t *testing.T) {
	srv := redistest.Start(t)
	emu := dingtalktest.New(dingtalktest.Options{Tokens: map[string]string{"tok": "dingapp"}})
	t.Cleanup(emu.Close)
	profile := dingtalk.MustNew(dingtalk.Config{Hosts: []string{emu.Host()}, Apps: []dingtalk.App{{AppKey: "dingapp"}}}).Profile()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })

	const n = 3
	var clients [n]*http.Client
	var logs [n]*liftLog
	var first *limiter.Shared
	for i := range n {
		logs[i] = &liftLog{signal: make(chan struct{}, 4)}
		shared, err := limiter.NewShared(srv.Client(t), limiter.SharedConfig{Prefix: prefix, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = shared
		}
		opts := []throttle.Option{
			throttle.WithLimiter(shared), throttle.WithProfiles(profile),
			throttle.WithLogger(slog.New(logs[i])), throttle.WithoutRetry(),
		}
		if i == 0 {
			opts = append(opts, throttle.WithMeterProvider(mp))
		} else {
			opts = append(opts, throttle.WithoutTelemetry())
		}
		tr := throttle.MustNew(opts...)
		t.Cleanup(func() { tr.Close() })
		clients[i] = &http.Client{Transport: tr}
	}
	addr := srv.Addr

	// Traffic: ten metered calls and two unmetered ones, spread over the
	// replicas; then the emulator answers the eleventh metered call with
	// the monthly quota error (a wrong answer, as an operator would find
	// it), which penalises the organisation's metered APIs on every replica.
	for i := range 10 {
		if code, err := call(t, clients[i%n], emu, metered); err != nil || code != http.StatusOK {
			t.Fatalf("metered call %d: %d, %v", i, code, err)
		}
	}
	for i := range 2 {
		if code, err := call(t, clients[i%n], emu, unmetered); err != nil || code != http.StatusOK {
			t.Fatalf("unmetered call %d: %d, %v", i, code, err)
		}
	}
	emu.FailNext(1, http.StatusForbidden, quotaBody)
	if code, err := call(t, clients[0], emu, metered); err != nil || code != http.StatusForbidden {
		t.Fatalf("the call answered with the quota error: %d, %v", code, err)
	}
	// The penalty is written to Redis off the request path: wait for it,
	// then every replica refuses metered calls.
	for deadline := time.Now().Add(10 * time.Second); ; {
		st, err := first.Inspect(context.Background(), profile.Name)
		if err == nil && len(st.Groups) == 1 && len(st.Groups[0].Penalties) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the penalty was not in Redis within 10s (%v)", err)
		}
		time.Sleep(20 * time.Millisecond) // polling a background write
	}
	var pen *throttle.PenaltyError
	for i := range n {
		_, err := call(t, clients[i], emu, metered)
		if !errors.As(err, &pen) {
			t.Fatalf("replica %d after the penalty: %v, want a PenaltyError", i, err)
		}
	}
	meteredSeen := 0
	for _, r := range emu.Requests() {
		if r.Path == metered {
			meteredSeen++
		}
	}
	if meteredSeen != 11 {
		t.Fatalf("the emulator saw %d metered calls, want 11", meteredSeen)
	}
	// The registry beats in the background: wait for all three.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if srv.Client(t).ZCard(context.Background(), "{"+prefix+":registry}:replicas").Val() == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the replicas did not all register within 10s")
		}
		time.Sleep(20 * time.Millisecond) // polling background beats
	}

	// status -json reports exactly that penalty, the replicas and counts.
	out, stderr, code := ctl(t, "", "-redis", addr, "-prefix", prefix, "status", "-json", "dingtalk")
	if code != 0 {
		t.Fatalf("status -json: exit %d, %s", code, stderr)
	}
	var st inspect.State
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status -json output: %v\n%s", err, out)
	}
	if len(st.Replicas) != n || len(st.Groups) != 1 || st.Groups[0].Group != dingtalk.Name {
		t.Fatalf("status: %d replicas, groups %+v; want %d replicas and dingtalk\n%s", len(st.Replicas), st.Groups, n, out)
	}
	g := st.Groups[0]
	if len(g.Penalties) != 1 || g.Penalties[0].Scope != pen.Scope || g.Penalties[0].Code != pen.Code || !g.Penalties[0].Until.Equal(pen.Until.Truncate(time.Microsecond)) {
		t.Fatalf("penalties %+v, want exactly %s %s until %v", g.Penalties, pen.Scope, pen.Code, pen.Until)
	}
	var month *inspect.RuleState
	kinds := map[string]int{}
	paced := map[string]bool{"egress:default": true, "api:dingapp:/v1.0/contact/users/{unionId}": true, "api:dingapp:uncatalogued": true}
	for i, r := range g.Rules {
		kinds[r.Kind]++
		if r.Kind == "paced" && !paced[r.Key] {
			t.Errorf("paced rule %q listed, want only the egress and the two per-API rules", r.Key)
		}
		if r.Key == "month:dingapp" {
			month = &g.Rules[i]
		}
	}
	if month == nil || month.Used != int64(meteredSeen) || month.Limit != 5000 || month.Window != "month" {
		t.Fatalf("month rule %+v, want %d / %d this month", month, meteredSeen, 5000)
	}
	if want := nextMonth(st.Now).Add(5 * time.Second); !month.ResetsAt.Equal(want) {
		t.Errorf("month resets %v, want %v", month.ResetsAt, want)
	}
	// The egress and two per-API rules are paced, each shown while its key
	// holds a slot not yet passed (a paced key lives no longer).
	if kinds["paced"] > 3 || kinds["calendar"] != 1 || len(kinds) > 2 {
		t.Errorf("rule kinds %v, want up to 3 paced and 1 calendar: %+v", kinds, g.Rules)
	}

	// The gauges report what the emulator saw.
	used, limit := quotaGauge(t, reader)
	if used != int64(meteredSeen) || limit != 5000 {
		t.Fatalf("gauges: used %d, limit %d; want %d, %d", used, limit, meteredSeen, 5000)
	}

	// The table, and -check.
	out, stderr, code = ctl(t, "", "-redis", addr, "-prefix", prefix, "status", "-check")
	if code != 1 {
		t.Fatalf("status -check with a penalty: exit %d, want 1; %s", code, stderr)
	}
	t.Logf("status:\n%s", out)
	for _, want := range []string{"replicas: 3 live", "penalties: 1 active", pen.Scope, "month:dingapp", "11 / 5000 used (0%) this month"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q", want)
		}
	}
	out, _, code = ctl(t, "", "-redis", addr, "-prefix", prefix, "watch", "-n", "2", "dingtalk")
	if code != 0 || strings.Count(out, "replicas: 3 live") != 2 {
		t.Errorf("watch -n 2: exit %d, output:\n%s", code, out)
	}

	// lift: declined, nothing changes; confirmed, every replica hears it.
	out, _, code = ctl(t, "n\n", "-redis", addr, "-prefix", prefix, "lift", pen.Scope, "-provider", "dingtalk")
	if code != 1 || !strings.Contains(out, "[y/N]") {
		t.Fatalf("declined lift: exit %d, output %q", code, out)
	}
	if _, err := call(t, clients[1], emu, metered); !errors.As(err, &pen) {
		t.Fatalf("after a declined lift: %v, want still penalised", err)
	}
	out, stderr, code = ctl(t, "y\n", "-redis", addr, "-prefix", prefix, "lift", pen.Scope, "-provider", "dingtalk")
	if code != 0 {
		t.Fatalf("lift: exit %d, %s %s", code, out, stderr)
	}
	_, at, ok := strings.Cut(out, "of dingtalk at ")
	liftedAt, err := time.Parse(time.RFC3339Nano, strings.TrimSuffix(strings.Fields(at + " ")[0], ";"))
	if !ok || err != nil {
		t.Fatalf("lift output %q: no time (%v)", out, err)
	}
	for i := range n {
		select {
		case <-logs[i].signal:
		case <-time.After(10 * time.Second):
			t.Fatalf("replica %d never heard of the lift", i)
		}
		logs[i].mu.Lock()
		heard := logs[i].heard[0]
		logs[i].mu.Unlock()
		if d := heard.Sub(liftedAt); d > time.Second {
			t.Errorf("replica %d closed its breaker %v after the lift, want within 1s", i, d)
		}
		t.Logf("replica %d closed its breaker %v after the tool's lift", i, heard.Sub(liftedAt))
		// And sends again: the call reaches the emulator and succeeds.
		if code, err := call(t, clients[i], emu, metered); err != nil || code != http.StatusOK {
			t.Fatalf("replica %d after the lift: %d, %v", i, code, err)
		}
	}
	out, _, code = ctl(t, "", "-redis", addr, "-prefix", prefix, "status", "-check", "dingtalk")
	if code != 0 || !strings.Contains(out, "penalties: none") || !strings.Contains(out, "14 / 5000 used") {
		t.Fatalf("status after the lift: exit %d\n%s", code, out)
	}
	if used, _ := quotaGauge(t, reader); used != 14 {
		t.Fatalf("gauge after the lift: used %d, want 14 (11 + one call per replica)", used)
	}
}

// quotaGauge collects once and returns the month quota's gauges.
func quotaGauge(t *testing.T, reader *sdkmetric.ManualReader) (used, limit int64) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			g, ok := m.Data.(metricdata.Gauge[int64])
			if !ok || (m.Name != "throttle.quota.used" && m.Name != "throttle.quota.limit") {
				continue
			}
			for _, dp := range g.DataPoints {
				p, _ := dp.Attributes.Value("provider")
				r, _ := dp.Attributes.Value("rule")
				w, _ := dp.Attributes.Value("window")
				if p.AsString() != dingtalk.Name || r.AsString() != "month" || w.AsString() != "month" || dp.Attributes.Len() != 3 {
					t.Fatalf("%s point with attributes %v, want provider, rule=month, window=month", m.Name, dp.Attributes.ToSlice())
				}
				found++
				if m.Name == "throttle.quota.used" {
					used = dp.Value
				} else {
					limit = dp.Value
				}
			}
		}
	}
	if found != 2 {
		t.Fatalf("found %d quota gauge points, want 2", found)
	}
	return used, limit
}

// Mistakes get exit code 2 and a message that says what to fix.
func TestErrors(t *testing.T) {
	open := redistest.Start(t)
	locked := redistest.Start(t)
	if err := locked.Client(t).ConfigSet(context.Background(), "requirepass", "sekret").Err(); err != nil {
		t.Fatal(err)
	}
	if err := open.Client(t).Set(context.Background(), "{throttle:dingtalk}:r:egress:default", "1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	nobody := fmt.Sprintf("127.0.0.1:%d", port)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"wrong address", []string{"-redis", nobody, "status"}, "cannot connect to Redis at " + nobody},
		{"unknown host", []string{"-redis", "no-such-host.invalid:6379", "status"}, `unknown host "no-such-host.invalid"`},
		{"not an address", []string{"-redis", "localhost", "status"}, "want host:port or a redis:// URL"},
		{"no password", []string{"-redis", locked.Addr, "status"}, "requires a password"},
		{"wrong password", []string{"-redis", "redis://:nope@" + locked.Addr, "status"}, "refused the credentials: wrong password"},
		{"wrong prefix", []string{"-redis", open.Addr, "-prefix", "nope", "status"}, `no keys found under prefix "nope"`},
		{"wrong provider", []string{"-redis", open.Addr, "status", "wechat"}, `no keys found for provider "wechat"`},
		{"no command", []string{"-redis", open.Addr}, "no command given"},
		// An expired context before, reported as Redis not answering.
		{"zero timeout", []string{"-redis", open.Addr, "-timeout", "0", "status"}, "-timeout must be positive"},
		{"negative timeout", []string{"-redis", open.Addr, "-timeout", "-1s", "status"}, "-timeout must be positive"},
		{"unknown command", []string{"-redis", open.Addr, "stats"}, `unknown command "stats"`},
		{"unknown flag", []string{"status", "-jsn"}, "flag provided but not defined: -jsn"},
		{"two providers", []string{"-redis", open.Addr, "status", "a", "b"}, "at most one PROVIDER"},
		{"lift without provider", []string{"-redis", open.Addr, "lift", "app:x"}, "lift needs -provider NAME"},
		{"lift without scope", []string{"-redis", open.Addr, "lift", "-provider", "dingtalk"}, "lift takes exactly one SCOPE"},
		{"negative count", []string{"-redis", open.Addr, "watch", "-n", "-1"}, "-n must not be negative"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, code := ctl(t, "", tc.args...)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q (stdout %q); want exit 2 and %q", code, stderr, out, tc.want)
			}
			if strings.Contains(stderr, "sekret") || strings.Contains(stderr, "nope@") {
				t.Fatalf("stderr shows the password: %q", stderr)
			}
		})
	}
	// A URL that does not parse: the parser quotes it cut at a '#', and a
	// '/' or '?' in the password as a bad port, so no piece of the
	// password may show (before, "Xq7" did).
	for _, u := range []string{"redis://u:Xq7#Zv9@127.0.0.1:1", "redis://:Xq7/Zv9@127.0.0.1:1", "redis://:Xq7?Zv9@127.0.0.1:1",
		"redis://:Xq7,Zv9@127.0.0.1:1", "redis://:Xq7,,Zv9@127.0.0.1:1"} {
		_, stderr, code := ctl(t, "", "-redis", u, "status")
		if code != 2 || !strings.Contains(stderr, "%2C") {
			t.Errorf("%s: exit %d, stderr %q; want exit 2 and how to write the password", u, code, stderr)
		}
		if strings.Contains(stderr, "Xq7") || strings.Contains(stderr, "Zv9") {
			t.Errorf("%s: stderr shows part of the password: %q", u, stderr)
		}
	}
	// The right password works.
	if _, stderr, code := ctl(t, "", "-redis", "redis://:sekret@"+locked.Addr, "status"); code != 2 || !strings.Contains(stderr, "no keys found") {
		t.Fatalf("with the right password on an empty Redis: exit %d, %q", code, stderr)
	}
	if out, _, code := ctl(t, "", "-redis", open.Addr, "status", "dingtalk"); code != 0 || !strings.Contains(out, "egress:default") {
		t.Fatalf("status on the open server: exit %d\n%s", code, out)
	}
}

// On a Redis Cluster, given every address or just one node's, the tool
// reads the node that owns the group's slot and lifts there.
func TestCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	l, err := limiter.NewShared(c.Client(t), limiter.SharedConfig{Prefix: prefix, Mode: limiter.OutageRefuse, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ctx := context.Background()
	until := time.Now().Add(time.Hour)
	for _, g := range []string{"dingtalk", "wechat", "feishu"} {
		if err := l.Penalize(ctx, g, limiter.Penalty{Scope: "app:a", Until: until, Code: "45009"}); err != nil {
			t.Fatal(err)
		}
	}
	// The three tags spread over the masters (each holds a third of the
	// slots), so finding every group takes every master.
	thirds := map[int]bool{}
	for _, g := range []string{"dingtalk", "wechat", "feishu"} {
		thirds[c.Slot(t, "{"+prefix+":"+g+"}")*3/16384] = true
	}
	if len(thirds) < 2 {
		t.Fatalf("the groups' slots all fall in one third: %v", thirds)
	}
	for _, addrs := range []string{strings.Join(c.Masters(), ","), c.Masters()[1]} {
		out, stderr, code := ctl(t, "", "-redis", addrs, "-prefix", prefix, "status", "-json")
		if code != 0 {
			t.Fatalf("status on %s: exit %d, %s", addrs, code, stderr)
		}
		var st inspect.State
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatal(err)
		}
		if len(st.Groups) != 3 {
			t.Fatalf("status on %s: groups %+v, want dingtalk, feishu and wechat", addrs, st.Groups)
		}
		for _, g := range st.Groups {
			if len(g.Penalties) != 1 || g.Penalties[0].Code != "45009" {
				t.Fatalf("status on %s: group %+v, want its penalty", addrs, g)
			}
		}
	}
	if out, stderr, code := ctl(t, "", "-redis", c.Masters()[0], "-prefix", prefix, "lift", "-yes", "-provider", "wechat", "app:a"); code != 0 {
		t.Fatalf("lift: exit %d, %s %s", code, out, stderr)
	}
	st, err := l.Inspect(ctx, "wechat", "dingtalk")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Groups[0].Penalties) != 0 || len(st.Groups[1].Penalties) != 1 {
		t.Fatalf("after lifting wechat's: %+v, want wechat's gone and dingtalk's kept", st.Groups)
	}
}

// nextMonth is 00:00 on the 1st of the month after t in Beijing (UTC+8, no
// daylight saving since 1991), when DingTalk's monthly quota resets.
func nextMonth(t time.Time) time.Time {
	bj := time.FixedZone("CST", 8*3600)
	y, m, _ := t.In(bj).Date()
	return time.Date(y, m+1, 1, 0, 0, 0, 0, bj)
}
