// Package checkrt checks the RoundTripper an adapter is given: nil, or a
// nil *throttle.Transport (its New error ignored), would send every call
// of the SDK through http.DefaultTransport, unthrottled and without a
// word, or panic on the first call far from the cause. The adapters have
// no error to return, so they panic at once, as regexp.MustCompile does.
package checkrt

import (
	"fmt"
	"net/http"
	"reflect"
)

// Transport returns rt, or panics naming fn when rt is nil or holds a nil
// pointer.
func Transport(fn string, rt http.RoundTripper) http.RoundTripper {
	if rt == nil {
		panic(fmt.Sprintf("%s: the RoundTripper is nil: every call would go unthrottled through http.DefaultTransport", fn))
	}
	if v := reflect.ValueOf(rt); v.Kind() == reflect.Pointer && v.IsNil() {
		panic(fmt.Sprintf("%s: the RoundTripper is a nil %T (was its constructor's error ignored?)", fn, rt))
	}
	return rt
}
