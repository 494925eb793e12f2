// Package rule describes the limits a provider enforces, for a
// limiter.Request to carry: a paced rate ([New]), a sliding window
// ([NewWindow]), a calendar quota that resets at a wall-clock time
// ([NewCalendar]) and a cap on requests in flight ([NewConcurrency]).
//
// Rules are values, valid once built and never changed afterwards; an
// invalid setting is refused where the rule is built with an [*Error] that
// names the field. Build package-level rules with [Must]:
//
//	var perSecond = rule.Must(rule.New("dingtalk:app", 20, time.Second))
//
// Which kind to use: [New] where the provider counts fixed wall-clock
// seconds (even spacing keeps every second within the limit); [NewWindow]
// where it lets a whole burst through while a minute or longer has room;
// [NewCalendar] for daily and monthly quotas; [NewConcurrency] for "too
// many concurrent requests".
package rule
