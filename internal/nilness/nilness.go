// Package nilness tells a nil value from one that holds something: a
// "var rdb *redis.Client" handed to a constructor is an interface that is
// not nil but whose pointer is, and calling through it panics far from
// the cause. The constructors refuse it where they check their other
// inputs.
package nilness

import "reflect"

// Is reports whether v is nil or an interface holding a nil pointer, map,
// slice, func, channel or interface.
func Is(v any) bool {
	if v == nil {
		return true
	}
	switch r := reflect.ValueOf(v); r.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Chan, reflect.Interface, reflect.Slice:
		return r.IsNil()
	}
	return false
}
