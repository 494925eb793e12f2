package nilness

import "testing"

func TestIs(t *testing.T) {
	var p *int
	var m map[string]int
	var f func()
	var s []int
	for _, v := range []any{nil, p, m, f, s} {
		if !Is(v) {
			t.Errorf("Is(%#v) = false, want true", v)
		}
	}
	n := 1
	for _, v := range []any{&n, map[string]int{}, func() {}, []int{}, 0, ""} {
		if Is(v) {
			t.Errorf("Is(%#v) = true, want false", v)
		}
	}
}
