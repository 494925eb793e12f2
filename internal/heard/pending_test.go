package heard

import (
	"sync"
	"testing"
)

func count(old int, queued bool) int { return old + 1 }

func TestMergesBoundsAndDrains(t *testing.T) {
	q := New[string, int](2)
	for _, k := range []string{"a", "a", "b", "a"} {
		if !q.Add(k, count) {
			t.Fatalf("Add(%q) refused under the bound", k)
		}
	}
	if q.Add("c", count) {
		t.Fatal("a third key was queued past the bound of 2")
	}
	batch, ok := q.Next()
	if !ok || len(batch) != 2 || batch["a"] != 3 || batch["b"] != 1 {
		t.Fatalf("Next = %v, %v; want a:3 b:1", batch, ok)
	}
	if !q.Add("c", count) {
		t.Fatal("the drained queue refused a key")
	}
	q.Close()
	if batch, ok := q.Next(); !ok || batch["c"] != 1 {
		t.Fatalf("after Close, what was queued before it: %v, %v", batch, ok)
	}
	if _, ok := q.Next(); ok {
		t.Fatal("Next after Close and drain returned true")
	}
}

// Every message added is in exactly one batch, whatever the interleaving.
func TestConcurrentAddAndNextLoseNothing(t *testing.T) {
	q := New[int, int](1 << 20)
	const n = 10000
	var got sync.Map
	done := make(chan int)
	go func() {
		total := 0
		for {
			batch, ok := q.Next()
			if !ok {
				done <- total
				return
			}
			for k, v := range batch {
				total += v
				got.Store(k, true)
			}
		}
	}()
	for i := range n {
		q.Add(i%100, count)
	}
	q.Close()
	if total := <-done; total != n {
		t.Fatalf("%d messages confirmed, want %d", total, n)
	}
}
