package circuit_test

import (
	"testing"
	"time"

	"github.com/quotaware/throttle/internal/circuit"
)

// The hot path, for scopes that were never penalised, allocates nothing,
// even while other scopes are open.
func TestAllowClosedAllocatesNothing(t *testing.T) {
	c := newClock(time.Unix(1_800_000_000, 0))
	cases := []struct {
		name      string
		penalised []string
	}{
		{"no penalty at all", nil},
		{"other scopes penalised", []string{"api:other", "app:other"}},
	}
	scopes := []string{"api:ding1:/v1.0/users", "app:ding1", "egress:default"}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newSet(t, c)
			for _, p := range tc.penalised {
				s.Penalize(p, c.Now().Add(time.Hour), "")
			}
			allocs := testing.AllocsPerRun(1000, func() {
				done, err := s.Allow(scopes)
				if err != nil {
					t.Fatal(err)
				}
				done(circuit.Success)
			})
			if allocs != 0 {
				t.Fatalf("%v allocations per Allow, want 0", allocs)
			}
		})
	}
}

func BenchmarkAllow(b *testing.B) {
	c := newClock(time.Unix(1_800_000_000, 0))
	scopes := []string{"api:ding1:/v1.0/users", "app:ding1", "egress:default"}
	cases := []struct {
		name      string
		penalised []string
	}{
		{"never penalised", nil},
		{"others penalised", []string{"api:other", "app:other"}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			s := newSet(b, c)
			for _, p := range tc.penalised {
				s.Penalize(p, c.Now().Add(time.Hour), "")
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					done, err := s.Allow(scopes)
					if err != nil {
						b.Fatal(err)
					}
					done(circuit.Success)
				}
			})
		})
	}
	b.Run("open scope", func(b *testing.B) {
		s := newSet(b, c)
		s.Penalize("app:ding1", c.Now().Add(time.Hour), "")
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := s.Allow(scopes); err == nil {
					b.Fatal("allowed")
				}
			}
		})
	})
}
