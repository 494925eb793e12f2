package routecache

import (
	"errors"
	"strconv"
	"sync"
	"testing"

	"github.com/quotaware/throttle/providers"
)

func TestGetBuildsOncePerKey(t *testing.T) {
	var c Cache
	builds := 0
	build := func() (providers.Route, error) {
		builds++
		return providers.Route{API: "a", Scopes: make([]string, 1, 4)}, nil
	}
	for range 3 {
		r, err := c.Get("a", build)
		if err != nil || r.API != "a" {
			t.Fatalf("Get = %+v, %v", r, err)
		}
		if cap(r.Scopes) != len(r.Scopes) {
			t.Fatalf("a cached route's scopes have room to append in place (cap %d, len %d)", cap(r.Scopes), len(r.Scopes))
		}
	}
	if builds != 1 {
		t.Fatalf("%d builds for one key, want 1", builds)
	}
}

func TestFailedBuildIsNotKept(t *testing.T) {
	var c Cache
	fail := errors.New("no org")
	if _, err := c.Get("a", func() (providers.Route, error) { return providers.Route{}, fail }); !errors.Is(err, fail) {
		t.Fatalf("err = %v", err)
	}
	r, err := c.Get("a", func() (providers.Route, error) { return providers.Route{API: "a"}, nil })
	if err != nil || r.API != "a" {
		t.Fatalf("after a failed build: %+v, %v", r, err)
	}
}

func TestCacheIsBounded(t *testing.T) {
	var c Cache
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range maxRoutes {
				key := strconv.Itoa(g*maxRoutes + i)
				if _, err := c.Get(key, func() (providers.Route, error) { return providers.Route{API: key}, nil }); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	n := 0
	c.m.Range(func(any, any) bool { n++; return true })
	if n > maxRoutes || c.n.Load() != int64(n) {
		t.Fatalf("%d routes kept (count %d), want at most %d", n, c.n.Load(), maxRoutes)
	}
}
