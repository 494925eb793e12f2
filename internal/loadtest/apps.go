package loadtest

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/apps"
)

// AppsJitter is the allowance for latency the many-apps acceptance tests
// fix in their presets: the presets' starting 50 ms, above the emulators'
// 0-20 ms, rather than the allowance measured from the answers. A measured
// allowance follows the test machine's late wakes too, rightly, and widens
// every window with them (a rise also re-books the requests waiting), while
// at the scaled-down rates of those tests (3-12 calls/s) one slot is 2.5-20%
// of a credential's share: measured, it took the shares to 72-92% on a
// loaded machine now and then, and 95-97.5% fixed. The tests are of apps
// and tenants; following the spread is the subject of dingtalk's
// TestHeadroomFollows*, at 20 calls/s.
const AppsJitter = 50 * time.Millisecond

// appsKey is the token-hashing key every replica's Book shares.
var appsKey = []byte("test-key-0123456789abcdef0123456")

// AppReplicas is Replicas where each replica also learns the apps of the
// tokens it carries (throttle.WithApps) with a Book the Transport builds on
// the replica's go-redis client and key prefix, all sharing one key, so
// that a token one replica fetched is known to all. It returns the Books
// too, for ExpectAllKnown.
func AppReplicas(t *testing.T, n int, opts ...throttle.Option) ([]*http.Client, []*apps.Book) {
	t.Helper()
	clients := ReplicasWith(t, n, func(int, *redis.Client, string) []throttle.Option {
		return []throttle.Option{throttle.WithApps(apps.Config{Key: appsKey})}
	}, opts...)
	books := make([]*apps.Book, n)
	for i, c := range clients {
		books[i] = c.Transport.(*throttle.Transport).Apps()
	}
	return clients, books
}

// FetchToken sends a token exchange through c, as an SDK would, and returns
// the string member of the JSON answer that holds the token; it fails t when
// there is none.
func FetchToken(t testing.TB, c *http.Client, req *http.Request, member string) string {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	tok, _ := m[member].(string)
	if tok == "" {
		t.Fatalf("%s %s: no %s in %s", req.Method, req.URL.Path, member, raw)
	}
	return tok
}

// ExpectAllKnown logs what each replica's Book learned and looked up, and
// fails t if any replica charged a call to the unknown apps' scope.
func ExpectAllKnown(t testing.TB, books []*apps.Book) {
	t.Helper()
	for i, b := range books {
		s := b.Stats()
		t.Logf("replica %d: learned %d, %d local hits, %d Redis lookups (%d found, %d errors), %d unknown",
			i, s.Learned, s.LocalHits, s.RedisLookups, s.RedisFound, s.RedisErrors, s.Unknown)
		if s.Unknown != 0 {
			t.Errorf("replica %d charged %d calls to the unknown scope, want 0", i, s.Unknown)
		}
	}
}
