package defaulttransport_test

import (
	"strings"
	"testing"
	"time"

	"github.com/royeo/dingrobot"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/integrations/internal/sdktest"
	"github.com/quotaware/throttle/providers/dingtalk"
	"github.com/quotaware/throttle/providers/dingtalk/dingtalktest"
)

const webhook = "https://oapi.dingtalk.com/robot/send?access_token=" + robotToken

// robotConfig and robotEmulator shorten DingTalk's robot window (20 in any
// minute) to a second on both sides, so that a run above the limit lasts
// seconds rather than minutes. The allowance is set, not measured: a
// measured one follows the loopback's 1 ms spread down to its floor, which
// a window scaled 60 times leaves no room for when the machine is loaded
// (a minute's window absorbs a scheduler's delays; a second's does not).
// 300 ms covers a send held that long after its slot by a loaded machine
// under -race (50 ms once let 21 sends into the emulator's second).
var robotConfig = dingtalk.Config{RobotPerMinute: 20, RobotWindow: time.Second, Jitter: 300 * time.Millisecond,
	Apps: []dingtalk.App{{AppKey: appKey}}}

func robotEmulator(t *testing.T) *dingtalktest.Server {
	emu := dingtalktest.New(dingtalktest.Options{
		Apps:        map[string]string{appKey: appSecret},
		Tokens:      map[string]string{robotToken: "robot"},
		RobotLimit:  20,
		RobotWindow: time.Second,
	})
	t.Cleanup(emu.Close)
	return emu
}

// Three times the limit at once through github.com/royeo/dingrobot: every
// message is accepted and the emulator rejects none.
func TestDingrobotAboveTheLimit(t *testing.T) {
	emu := robotEmulator(t)
	install(t, emu, robotConfig)
	robot := dingrobot.NewRobot(webhook)
	sdktest.NoErrors(t, sdktest.Fire(60, 20, func(i int) error {
		return robot.SendText("build passed", nil, false)
	}))
	if st := emu.Stats(); st.Rejected != 0 || st.Bans != 0 || st.Requests != 60 {
		t.Fatalf("emulator: %+v, want 60 requests and no rejection", st)
	}
}

func TestDingrobotErrors(t *testing.T) {
	emu := newEmulator(t)
	install(t, emu, dingtalk.Config{Apps: []dingtalk.App{{AppKey: appKey}}}, throttle.WithMaxWait(0)) // the default 20 per minute
	robot := dingrobot.NewRobot(webhook)
	sdktest.UntilThrottled(t, 1000, func() error { return robot.SendText("build passed", nil, false) })

	install(t, emu, dingtalk.Config{Apps: []dingtalk.App{{AppKey: appKey}}})
	// 410100: the robot sent too fast; the preset closes it for 10 minutes.
	emu.FailNext(1, 200, `{"errcode":410100,"errmsg":"send too fast, exceed 20 times per minute"}`)
	if err := robot.SendText("build passed", nil, false); err == nil || !strings.Contains(err.Error(), "send too fast") {
		t.Fatalf("the robot's quota answer: %v", err)
	}
	sdktest.Penalized(t, robot.SendText("build passed", nil, false))
}
