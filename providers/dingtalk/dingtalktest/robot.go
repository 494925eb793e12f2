package dingtalktest

import (
	"net/http"
	"strconv"
	"time"
)

// robotPath is the custom group robot webhook; the robot is named by its
// access_token.
const robotPath = "/robot/send"

// robot is one custom group robot's recent messages and throttling.
type robot struct {
	sends []time.Time // the last RobotLimit accepted messages, oldest first
	until time.Time   // throttled until then
}

// robotLocked counts a robot message: accepted while the robot has sent
// fewer than RobotLimit in the RobotWindow before now, otherwise 410100 and
// the robot is throttled for the (scaled) RobotPenalty. Called with the lock
// held.
func (s *Server) robotLocked(now time.Time, tok string) answer {
	rb := s.robots[tok]
	if rb == nil {
		rb = &robot{}
		s.robots[tok] = rb
	}
	if now.Before(rb.until) {
		s.stats.Rejected++
		return robotThrottled(s.opts.RobotLimit)
	}
	if len(rb.sends) >= s.opts.RobotLimit && now.Sub(rb.sends[len(rb.sends)-s.opts.RobotLimit]) < s.opts.RobotWindow {
		rb.until = now.Add(s.scaled(s.opts.RobotPenalty))
		s.stats.Rejected++
		return robotThrottled(s.opts.RobotLimit)
	}
	rb.sends = append(rb.sends, now)
	if len(rb.sends) > s.opts.RobotLimit {
		rb.sends = append(rb.sends[:0], rb.sends[len(rb.sends)-s.opts.RobotLimit:]...)
	}
	return jsonAnswer(http.StatusOK, "", `{"errcode":0,"errmsg":"ok"}`)
}

func robotThrottled(limit int) answer {
	return jsonAnswer(http.StatusOK, "410100",
		`{"errcode":410100,"errmsg":"send too fast, exceed `+strconv.Itoa(limit)+` times per minute"}`)
}
