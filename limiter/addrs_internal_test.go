package limiter

import (
	"testing"

	"github.com/redis/go-redis/v9"
)

// Errors and the outage log name the servers a client dials: every kind of
// go-redis client, a ring's addresses (not its shard names), and nothing
// for a Sentinel client, whose options hold a placeholder.
func TestRedisAddrs(t *testing.T) {
	for _, tc := range []struct {
		c    redis.UniversalClient
		want string
	}{
		{redis.NewClient(&redis.Options{Addr: "10.0.0.1:6379"}), "10.0.0.1:6379"},
		{redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"10.0.0.1:7000", "10.0.0.2:7000"}}), "10.0.0.1:7000,10.0.0.2:7000"},
		{redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"b": "10.0.0.2:6379", "a": "10.0.0.1:6379"}}), "10.0.0.1:6379,10.0.0.2:6379"},
		{redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"10.0.0.9:26379"}}), ""},
	} {
		if got := redisAddrs(tc.c); got != tc.want {
			t.Errorf("%T: %q, want %q", tc.c, got, tc.want)
		}
		tc.c.Close()
	}
}
