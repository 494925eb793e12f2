package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/providers/dingtalk"
)

// isvAPIs are the catalogued DingTalk APIs an ISV suite calls in the
// footprint run: one rule set per org and API.
var isvAPIs = []string{
	"/topapi/ai/mt/translate", "/topapi/asr/voice/translate", "/topapi/attendance/getsimplegroups",
	"/topapi/attendance/getupdatedata", "/topapi/attendance/getusergroup", "/topapi/attendance/group/add",
	"/topapi/attendance/group/minimalism/list", "/topapi/attendance/group/query", "/topapi/attendance/group/search",
	"/topapi/attendance/list", "/topapi/chat/member/friendswitch/update", "/topapi/chat/qrcode/get",
	"/topapi/chat/subadmin/update", "/topapi/chat/updategroupnick", "/topapi/extcontact/create",
	"/topapi/extcontact/delete", "/topapi/extcontact/get", "/topapi/extcontact/list",
	"/topapi/extcontact/listlabelgroups", "/topapi/extcontact/update",
}

// isvRow is the Redis footprint of one run: orgs x APIs rule sets, each
// charged once.
type isvRow struct {
	orgs, apis, calls int
	// peakKeys and peakBytes are the most keys and used_memory (less
	// before) seen at once while the calls ran, sampled every 50 ms.
	peakKeys, peakBytes int64
	keys                int64 // keys left once the calls are done
	usedBytes           int64 // INFO memory used_memory then, less before
	sampleMin, sampleMx int64 // MEMORY USAGE of a key left, least and most
	keyBytes            int64 // MEMORY USAGE summed over every key left
	noTTL               int   // keys without an expiry: must be 0
	maxTTL              time.Duration
	maxKey              string // the key of maxTTL
	took                time.Duration
}

// okAnswer answers every call at once: only the limiter's cost remains.
type okAnswer struct{}

func (okAnswer) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(`{"errcode":0,"errmsg":"ok"}`)), ContentLength: 27, Request: r}, nil
}

// isvFootprint charges one call per org and API of a DingTalk ISV suite
// through a Transport on a flushed Redis, then measures what is left there:
// memory, keys, a sample of key sizes and every key's expiry.
func isvFootprint(ctx context.Context, rdb *redis.Client, orgs int) (isvRow, error) {
	row := isvRow{orgs: orgs, apis: len(isvAPIs)}
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		return row, err
	}
	before, err := usedMemory(ctx, rdb)
	if err != nil {
		return row, err
	}
	// The egress limit (10,000 per 20 s) would pace the run, not the
	// per-org rules it measures.
	preset := dingtalk.MustNew(dingtalk.Config{Jitter: time.Millisecond, EgressLimit: 1_000_000_000, EgressPeriod: time.Second,
		Apps: []dingtalk.App{{AppKey: "suitebench", ISV: true, CorpID: "dingorg0", NoMonthlyQuota: true}}})
	tr, err := throttle.New(throttle.WithLimiter(limiter.MustNewShared(rdb, limiter.SharedConfig{})),
		throttle.WithBase(okAnswer{}), throttle.WithProfiles(preset.Profile()), throttle.WithoutTelemetry(),
		throttle.WithoutRetry(), throttle.WithMaxWait(time.Minute))
	if err != nil {
		return row, err
	}
	defer tr.Close()
	start := time.Now()
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	sampled := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			if n, err := rdb.DBSize(ctx).Result(); err == nil {
				row.peakKeys = max(row.peakKeys, n)
			}
			if m, err := usedMemory(ctx, rdb); err == nil {
				row.peakBytes = max(row.peakBytes, m-before)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	total := int64(orgs * len(isvAPIs))
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < total; i = next.Add(1) - 1 {
				org := "dingorg" + strconv.FormatInt(i/int64(len(isvAPIs)), 10)
				rctx := throttle.ContextWithTenant(ctx, "suitebench", org)
				req, _ := http.NewRequestWithContext(rctx, http.MethodPost,
					"https://oapi.dingtalk.com"+isvAPIs[i%int64(len(isvAPIs))]+"?access_token=t", strings.NewReader("{}"))
				resp, err := tr.RoundTrip(req)
				if err != nil {
					failed.Add(1)
					continue
				}
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	row.took = time.Since(start)
	close(done)
	<-sampled
	row.calls = int(total - failed.Load())
	if failed.Load() > 0 {
		return row, fmt.Errorf("%d of %d calls failed", failed.Load(), total)
	}
	after, err := usedMemory(ctx, rdb)
	if err != nil {
		return row, err
	}
	row.usedBytes = after - before
	row.peakBytes = max(row.peakBytes, row.usedBytes)
	row.keys, err = rdb.DBSize(ctx).Result()
	if err != nil {
		return row, err
	}
	row.peakKeys = max(row.peakKeys, row.keys)
	return row, keyExpiries(ctx, rdb, &row)
}

// keyExpiries reads every key's expiry (none is a leak) and size, a
// pipeline per SCAN page; a key that expired between the SCAN and its
// PTTL (-2) is left out.
func keyExpiries(ctx context.Context, rdb *redis.Client, row *isvRow) error {
	var cursor uint64
	first := true
	for {
		keys, next, err := rdb.Scan(ctx, cursor, "*", 1000).Result()
		if err != nil {
			return err
		}
		pipe := rdb.Pipeline()
		ttls := make([]*redis.DurationCmd, len(keys))
		sizes := make([]*redis.IntCmd, len(keys))
		for i, k := range keys {
			ttls[i], sizes[i] = pipe.PTTL(ctx, k), pipe.MemoryUsage(ctx, k)
		}
		if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
			return err
		}
		for i := range keys {
			ttl, n := ttls[i].Val(), sizes[i].Val()
			switch ttl {
			case -2: // gone since the SCAN
				continue
			case -1:
				row.noTTL++
			}
			if ttl > row.maxTTL {
				row.maxTTL, row.maxKey = ttl, keys[i]
			}
			row.keyBytes += n
			if first || n < row.sampleMin {
				row.sampleMin = n
			}
			row.sampleMx, first = max(row.sampleMx, n), false
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// usedMemory reads INFO memory's used_memory.
func usedMemory(ctx context.Context, rdb *redis.Client) (int64, error) {
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no used_memory in INFO memory")
}

// isvTable writes the footprint rows as Markdown.
func isvTable(rows []isvRow) string {
	var b strings.Builder
	b.WriteString("| orgs × APIs | calls | took | most keys at once | most `used_memory` added | keys left | `used_memory` added then | keys' `MEMORY USAGE` | one key | keys without expiry | longest expiry |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %d × %d | %d | %v | %d | %.1f MiB | %d | %.1f MiB | %.2f MiB | %d-%d B | %d | %v |\n",
			r.orgs, r.apis, r.calls, r.took.Round(10*time.Millisecond), r.peakKeys, float64(r.peakBytes)/(1<<20),
			r.keys, float64(r.usedBytes)/(1<<20), float64(r.keyBytes)/(1<<20), r.sampleMin, r.sampleMx, r.noTTL,
			r.maxTTL.Round(100*time.Millisecond))
	}
	return b.String()
}
