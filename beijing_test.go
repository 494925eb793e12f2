package throttle_test

import "time"

// beijing is the zone in which DingTalk states penalty ends and resets its
// monthly quota. China has kept UTC+8 without daylight saving since 1991.
var beijing = time.FixedZone("CST", 8*3600)

// nextSecond is the start of the wall-clock second after t.
func nextSecond(t time.Time) time.Time {
	return t.Truncate(time.Second).Add(time.Second)
}

// nextMonth is 00:00 on the 1st of the month after t, Beijing time.
func nextMonth(t time.Time) time.Time {
	y, m, _ := t.In(beijing).Date()
	return time.Date(y, m+1, 1, 0, 0, 0, 0, beijing)
}
