package apps_test

import (
	"context"
	"net/http"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/quotaware/throttle/apps"
)

// BenchmarkResolve is what tagging a request costs on the request path when
// its token is known locally: the common case, no Redis call.
func BenchmarkResolve(b *testing.B) {
	book := apps.MustNew(apps.Config{})
	ctx := context.Background()
	tok := "5f1e0a4c2b9d8e7f6a5b4c3d2e1f0a9b" // the length of a DingTalk token
	_ = book.Learn(ctx, tok, apps.App{Provider: "dingtalk", ID: "dingA"}, time.Hour)
	req, _ := http.NewRequest("GET", "https://oapi.dingtalk.com/topapi/v2/user/get?access_token="+tok, nil)
	b.ReportAllocs()
	for b.Loop() {
		if r := book.Resolve(req, "dingtalk"); r == req {
			b.Fatal("not tagged")
		}
	}
}

// BenchmarkLookupParallel is a lookup of a known token from every core.
func BenchmarkLookupParallel(b *testing.B) {
	book := apps.MustNew(apps.Config{})
	ctx := context.Background()
	toks := make([]string, 1024)
	for i := range toks {
		toks[i] = "token-" + strconv.Itoa(i) + "-5f1e0a4c2b9d8e7f6a5b4c3d"
		_ = book.Learn(ctx, toks[i], apps.App{Provider: "dingtalk", ID: "dingA"}, time.Hour)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, ok := book.Lookup(ctx, toks[i%len(toks)]); !ok {
				b.Error("unknown")
				return
			}
			i++
		}
	})
}

// BenchmarkMemoryPerToken learns 100,000 tokens of 1,000 apps and reports
// the heap they hold, per token (target: under 200 bytes).
func BenchmarkMemoryPerToken(b *testing.B) {
	const n = 100_000
	ctx := context.Background()
	toks := make([]string, n)
	for i := range toks {
		toks[i] = "token-" + strconv.Itoa(i) + "-5f1e0a4c2b9d8e7f6a5b4c3d"
	}
	var perToken float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		book := apps.MustNew(apps.Config{})
		for i, tok := range toks {
			_ = book.Learn(ctx, tok, apps.App{Provider: "dingtalk", ID: "suite", Org: "org" + strconv.Itoa(i%1000)}, time.Hour)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perToken = float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(book)
	}
	b.ReportMetric(perToken, "B/token")
}

// BenchmarkLearnIntoFullBook learns new tokens into a Book whose every
// shard is full of live entries: each makes room by evicting one. The cost
// per token must not grow with the Book's size (a full shard once walked
// all its entries for every new token).
func BenchmarkLearnIntoFullBook(b *testing.B) {
	ctx := context.Background()
	for _, perShard := range []int{1 << 10, 1 << 14} {
		b.Run(strconv.Itoa(perShard)+" per shard", func(b *testing.B) {
			book := apps.MustNew(apps.Config{MaxTokens: 16 * perShard})
			app := apps.App{Provider: "dingtalk", ID: "suite", Org: "org"}
			for i := range 16 * perShard {
				_ = book.Learn(ctx, "full-"+strconv.Itoa(i), app, time.Hour)
			}
			i := 0
			for b.Loop() {
				_ = book.Learn(ctx, "new-"+strconv.Itoa(i), app, time.Hour)
				i++
			}
		})
	}
}
