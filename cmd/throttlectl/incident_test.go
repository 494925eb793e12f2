package main_test

// The tool during an incident, against keyspaces and faults as they are
// met in production: a million rule keys beside an IP ban, a penalty that
// changes while the operator reads the prompt, a Redis user that may not
// PUBLISH, replicas that report faults, and a provider's name mistyped.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter/inspect"
	"github.com/redis/go-redis/v9"
)

// populate writes n string keys "<head><i>" in batches of a Lua loop, the
// way a busy Feishu deployment leaves one rule key per chat.
func populate(t *testing.T, c *redis.Client, head string, n int) {
	t.Helper()
	const batch = 100_000
	loop := redis.NewScript(`for i = tonumber(ARGV[2]), tonumber(ARGV[3]) do redis.call('SET', ARGV[1] .. i, '1') end return 1`)
	for from := 0; from < n; from += batch {
		if err := loop.Run(context.Background(), c, nil, head, from, min(from+batch, n)-1).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// penaltyValue is a penalty key's value as the limiter writes it.
func penaltyValue(until time.Time, code, by string) string {
	return strconv.FormatInt(until.UnixMicro(), 10) + "|" + code + "|" + by
}

// Case 22.7: with a million rule keys in one group, status -check still
// finds a DingTalk IP ban and a Feishu penalty and exits 1; the dingtalk
// group, with one rule key among them, is listed.
func TestCheckFindsPenaltiesAmongAMillionKeys(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	const n = 1_000_000
	start := time.Now()
	populate(t, c, "{ops:feishu}:r:chat:", n)
	t.Logf("wrote %d rule keys in %v", n, time.Since(start))
	until := time.Now().Add(5 * time.Minute)
	for k, v := range map[string]string{
		"{ops:dingtalk}:p:ip":           penaltyValue(until, "ip-ban", "replica-a"),
		"{ops:feishu}:p:app:cli_x":      penaltyValue(until, "99991400", "replica-b"),
		"{ops:dingtalk}:r:egress:corp1": strconv.FormatInt(time.Now().UnixMicro(), 10),
	} {
		if err := c.Set(ctx, k, v, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	start = time.Now()
	out, stderr, code := ctl(t, "", "-redis", srv.Addr, "-prefix", "ops", "status", "-check")
	t.Logf("status -check over %d keys: %v", n+3, time.Since(start))
	if code != 1 {
		t.Fatalf("status -check: exit %d, want 1 (penalties active); stderr %q\n%s", code, stderr, out)
	}
	for _, want := range []string{"\ndingtalk\n", "\nfeishu\n", "ip-ban", "app:cli_x", "99991400", "egress:corp1",
		"more than 10000 rule keys: the rule list is cut; every penalty is shown"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
	start = time.Now()
	out, stderr, code = ctl(t, "", "-redis", srv.Addr, "-prefix", "ops", "status", "-check", "-json", "feishu")
	t.Logf("status -check feishu over %d keys: %v", n+3, time.Since(start))
	var st inspect.State
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != 1 {
		t.Fatalf("status -check feishu: exit %d, %v; stderr %q", code, err, stderr)
	}
	g := st.Groups[0]
	if len(g.Penalties) != 1 || g.Penalties[0].Scope != "app:cli_x" || !g.Truncated || g.PenaltiesTruncated || len(g.Rules) != inspect.MaxKeys {
		t.Fatalf("feishu: %d penalties %+v, rules %d truncated %v; want the one penalty and the rule list cut",
			len(g.Penalties), g.Penalties, len(g.Rules), g.Truncated)
	}
}

// Case 22.7: with more penalty keys than the tool reads, it cannot vouch
// that none is active: status fails (exit 2, saying why), with or without
// -check, even when those read are all over.
func TestStatusFailsWhenThePenaltyBoundIsMet(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	// Penalties over by their value (their keys not yet expired), more of
	// them than the bound, among rule keys.
	over := penaltyValue(time.Now().Add(-time.Minute), "old", "")
	loop := redis.NewScript(`for i = 0, tonumber(ARGV[2]) - 1 do redis.call('SET', ARGV[1] .. i, ARGV[3], 'EX', 3600) end return 1`)
	if err := loop.Run(ctx, c, nil, "{ops:wecom}:p:member:", inspect.MaxPenaltyKeys+1, over).Err(); err != nil {
		t.Fatal(err)
	}
	populate(t, c, "{ops:wecom}:r:member:", 2*inspect.MaxKeys)
	for _, args := range [][]string{{"status"}, {"status", "-check"}, {"status", "-check", "wecom"}} {
		out, stderr, code := ctl(t, "", append([]string{"-redis", srv.Addr, "-prefix", "ops"}, args...)...)
		if code != 2 || !strings.Contains(stderr, fmt.Sprintf(`group "wecom" has more than %d penalty keys`, inspect.MaxPenaltyKeys)) ||
			!strings.Contains(stderr, "none can be said to be absent") {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 saying the penalties were not all read\n%s", args, code, stderr, out)
		}
	}
}

// interactiveLift runs lift without -yes; when the prompt shows, it calls
// meanwhile, then answers y. It returns stdout and the exit code.
func interactiveLift(t *testing.T, meanwhile func(), args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, tool, args...)
	cmd.Env = append(os.Environ(), "THROTTLE_REDIS=", "THROTTLE_REDIS_PASSWORD=")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	buf := make([]byte, 4096)
	for !strings.Contains(out.String(), "[y/N] ") {
		n, err := stdout.Read(buf)
		out.Write(buf[:n])
		if err != nil {
			t.Fatalf("no prompt: %v; stdout %q, stderr %q", err, out.String(), stderr.String())
		}
	}
	meanwhile()
	io.WriteString(stdin, "y\n")
	stdin.Close()
	rest, _ := io.ReadAll(stdout)
	out.Write(rest)
	err = cmd.Wait()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), code
}

// Case 22.7: lift removes only the penalty the operator was shown: a
// 5-minute IP ban written while the operator was at the prompt stays, and
// the tool says so; a penalty that appears where none was shown stays too;
// the penalty shown goes, and the tool says which.
func TestLiftRemovesOnlyThePenaltyShown(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	key := "{ops:dingtalk}:p:ip"
	shown := penaltyValue(time.Now().Add(2*time.Second), "90018", "replica-a")
	if err := c.Set(ctx, key, shown, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	ban := penaltyValue(time.Now().Add(5*time.Minute), "ip-ban", "replica-b")
	args := []string{"-redis", srv.Addr, "-prefix", "ops", "lift", "-provider", "dingtalk", "ip"}
	out, code := interactiveLift(t, func() {
		if err := c.Set(ctx, key, ban, 5*time.Minute).Err(); err != nil {
			t.Error(err)
		}
	}, args...)
	if code != 1 || !strings.Contains(out, "code 90018") || !strings.Contains(out, "changed since it was shown: it is now code ip-ban") ||
		!strings.Contains(out, "Nothing was removed") {
		t.Fatalf("lift of a penalty replaced at the prompt: exit %d\n%s", code, out)
	}
	if v := c.Get(ctx, key).Val(); v != ban {
		t.Fatalf("after the refused lift the key holds %q, want the IP ban %q", v, ban)
	}

	// None shown; one recorded at the prompt: it stays.
	other := "{ops:dingtalk}:p:app:dingapp"
	args = []string{"-redis", srv.Addr, "-prefix", "ops", "lift", "-provider", "dingtalk", "app:dingapp"}
	out, code = interactiveLift(t, func() {
		if err := c.Set(ctx, other, ban, 5*time.Minute).Err(); err != nil {
			t.Error(err)
		}
	}, args...)
	if code != 1 || !strings.Contains(out, "No active penalty") || !strings.Contains(out, "it is now code ip-ban") {
		t.Fatalf("lift where none was shown and one appeared: exit %d\n%s", code, out)
	}
	if c.Exists(ctx, other).Val() != 1 {
		t.Fatal("the penalty that appeared at the prompt was removed")
	}

	// The penalty shown goes, and the tool says which it removed.
	out, code = interactiveLift(t, func() {}, "-redis", srv.Addr, "-prefix", "ops", "lift", "-provider", "dingtalk", "ip")
	if code != 0 || !strings.Contains(out, "removed the penalty code ip-ban") || !strings.Contains(out, "set by replica-b") ||
		!strings.Contains(out, "the replicas were told") {
		t.Fatalf("lift of the penalty shown: exit %d\n%s", code, out)
	}
	if c.Exists(ctx, key).Val() != 0 {
		t.Fatal("the penalty shown and confirmed is still there")
	}
}

// Case 22.8: when the lift's announcement fails (a Redis user without
// PUBLISH), the tool says the key was deleted but the replicas were not
// told, and exits 2.
func TestLiftSaysWhenReplicasWereNotTold(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	if err := c.Do(ctx, "ACL", "SETUSER", "ops", "on", ">opspass", "~*", "&*", "+@all", "-publish").Err(); err != nil {
		t.Fatal(err)
	}
	key := "{ops:dingtalk}:p:ip"
	if err := c.Set(ctx, key, penaltyValue(time.Now().Add(5*time.Minute), "ip-ban", ""), time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := ctl(t, "", "-redis", "redis://ops:opspass@"+srv.Addr, "-prefix", "ops", "lift", "-yes", "-provider", "dingtalk", "ip")
	if code != 2 || !strings.Contains(out, "Deleted the penalty on ip of dingtalk (code ip-ban") ||
		!strings.Contains(out, "but the replicas were NOT told") || !strings.Contains(out, "NOPERM") ||
		strings.Contains(out+stderr, "were told.") || strings.Contains(out+stderr, "opspass") {
		t.Fatalf("lift without PUBLISH: exit %d\nstdout %s\nstderr %s", code, out, stderr)
	}
	if c.Exists(ctx, key).Val() != 0 {
		t.Fatal("the key is still there")
	}
}

// Case 22.8: faults that replicas record ({prefix:registry}:fault:<id>) are
// listed with what they mean, and -check fails while any exists.
func TestStatusShowsReplicaFaults(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	if err := c.Set(ctx, "{ops:dingtalk}:r:egress:corp1", "1", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	base := []string{"-redis", srv.Addr, "-prefix", "ops", "status"}
	if out, stderr, code := ctl(t, "", append(base, "-check")...); code != 0 {
		t.Fatalf("status -check without faults: exit %d, %s\n%s", code, stderr, out)
	}
	faults := map[string]string{
		"replica-7": "subscribe: NOPERM User ops has no permissions to access the 'ops:penalties' channel",
		"replica-9": "publish: NOPERM User ops has no permissions to run the 'publish' command",
	}
	for id, v := range faults {
		if err := c.Set(ctx, "{ops:registry}:fault:"+id, v, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	out, stderr, code := ctl(t, "", base...)
	if code != 0 {
		t.Fatalf("status with faults: exit %d, %s", code, stderr)
	}
	for _, want := range []string{
		"replica replica-7 cannot subscribe (NOPERM User ops has no permissions to access the 'ops:penalties' channel): it will not hear lifts",
		"replica replica-9 cannot publish (NOPERM", "other replicas will not hear of the penalties it learns",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	for _, args := range [][]string{{"-check"}, {"-check", "dingtalk"}} {
		_, stderr, code := ctl(t, "", append(base, args...)...)
		if code != 1 || !strings.Contains(stderr, "2 replica fault(s) recorded") {
			t.Errorf("status %v with faults: exit %d, stderr %q; want exit 1", args, code, stderr)
		}
	}
	out, _, _ = ctl(t, "", append(base, "-json")...)
	var st inspect.State
	if err := json.Unmarshal([]byte(out), &st); err != nil || len(st.Faults) != 2 || st.Faults[0].Replica != "replica-7" ||
		st.Faults[0].What != "subscribe" || st.Faults[1].What != "publish" {
		t.Fatalf("status -json faults: %+v, %v", st.Faults, err)
	}
	// Once the faults expire (the replicas can again), -check passes.
	c.Del(ctx, "{ops:registry}:fault:replica-7", "{ops:registry}:fault:replica-9")
	if _, stderr, code := ctl(t, "", append(base, "-check")...); code != 0 {
		t.Fatalf("status -check after the faults: exit %d, %s", code, stderr)
	}
}

// Case 24.2: a mistyped provider is an error that lists the known ones,
// even with live replicas and dingtalk penalised; -check never passes on a
// name that has no state; lift refuses an unknown name but announces for a
// built-in one without state.
func TestUnknownProvider(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	if err := c.Set(ctx, "{ops:dingtalk}:p:ip", penaltyValue(time.Now().Add(5*time.Minute), "ip-ban", ""), time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	// A live replica, as the registry records it.
	if err := c.ZAdd(ctx, "{ops:registry}:replicas", redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: "replica-1"}).Err(); err != nil {
		t.Fatal(err)
	}
	base := []string{"-redis", srv.Addr, "-prefix", "ops"}
	for _, args := range [][]string{{"status", "-check", "dingtlak"}, {"status", "dingtlak"}, {"watch", "-n", "1", "dingtlak"},
		{"lift", "-yes", "-provider", "dingtlak", "ip"}} {
		out, stderr, code := ctl(t, "", append(base, args...)...)
		if code != 2 || !strings.Contains(stderr, `unknown provider "dingtlak"`) ||
			!strings.Contains(stderr, "known providers: dingtalk, feishu, wechat, wecom (built in); with state here: dingtalk") {
			t.Errorf("%v: exit %d, stderr %q\n%s", args, code, stderr, out)
		}
	}
	out, stderr, code := ctl(t, "", append(base, "status", "-check", "wechat")...)
	if code != 2 || !strings.Contains(stderr, `no keys found for provider "wechat"`) || !strings.Contains(stderr, "with state here: dingtalk") {
		t.Errorf("status -check of a provider without state: exit %d, stderr %q\n%s", code, stderr, out)
	}
	out, stderr, code = ctl(t, "", append(base, "lift", "-yes", "-provider", "wechat", "app:wx1")...)
	if code != 0 || !strings.Contains(out, "there was no penalty to remove; the replicas were told") {
		t.Errorf("lift on a built-in provider without state: exit %d, stderr %q\n%s", code, stderr, out)
	}
	if _, stderr, code := ctl(t, "", append(base, "status", "-check", "dingtalk")...); code != 1 {
		t.Errorf("status -check dingtalk: exit %d, %q; want 1", code, stderr)
	}
}
