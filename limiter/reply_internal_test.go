package limiter

import (
	"testing"
	"time"
)

// A penalty line names one of the request's penalty keys by its position;
// any other position is a malformed reply, not a penalty without a scope.
func TestPenaltyLineNamesOneOfTheRequestsScopes(t *testing.T) {
	req := &Request{Group: "g", Scopes: []string{"api:a", "app:x"}}
	now := time.Now()
	for _, index := range []int64{0, 3, -1} {
		if _, ok := answer(req, now, 2, 1000, index, "", "1|45009"); ok {
			t.Errorf("penalty at position %d of 2 scopes: accepted", index)
		}
	}
	res, ok := answer(req, now, 2, 1000, 2, "", "1|45009")
	if !ok || res.Penalty() == nil || res.Penalty().Scope != "app:x" || res.Penalty().Code != "45009" {
		t.Fatalf("penalty at position 2: %v, %+v", ok, res.Penalty())
	}
}
