// Package rulecore is a rule's parsed form, shared by package rule, which
// builds and validates it, and package limiter, which enforces it, without
// showing users fields that must not change once a rule is built.
//
// Package rule keeps a Rule in an unexported field and, at init, stores in
// Of the function that reaches it; package limiter asserts Of's type once.
// That costs nothing per request and keeps rule.Rule immutable from outside.
package rulecore
