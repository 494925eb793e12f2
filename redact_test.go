package throttle_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle"
)

func TestRedactURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"https://oapi.dingtalk.com/topapi/v2/user/get?access_token=abc123",
			"https://oapi.dingtalk.com/topapi/v2/user/get?access_token=REDACTED"},
		{"https://qyapi.weixin.qq.com/cgi-bin/gettoken?corpid=ww1&corpsecret=s3cr3t",
			"https://qyapi.weixin.qq.com/cgi-bin/gettoken?corpid=ww1&corpsecret=REDACTED"},
		{"https://api.weixin.qq.com/cgi-bin/token?grant_type=client_credential&appid=wx1&secret=s",
			"https://api.weixin.qq.com/cgi-bin/token?grant_type=client_credential&appid=wx1&secret=REDACTED"},
		{"https://oapi.dingtalk.com/robot/send?access_token=t&timestamp=1700000000000&sign=abc%2Bdef%3D",
			"https://oapi.dingtalk.com/robot/send?access_token=REDACTED&timestamp=1700000000000&sign=REDACTED"},
		{"https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=693a91f6",
			"https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=REDACTED"},
		{"https://api.weixin.qq.com/cgi-bin/component/api_component_token?component_access_token=x&AppSecret=y",
			"https://api.weixin.qq.com/cgi-bin/component/api_component_token?component_access_token=REDACTED&AppSecret=REDACTED"},
		{"https://user:pass@example.com/x?page=2", "https://user:REDACTED@example.com/x?page=2"},
		{"https://open.feishu.cn/open-apis/bot/v2/hook/0f2e4b8a-1c3d-4e5f-a6b7-c8d9e0f1a2b3",
			"https://open.feishu.cn/open-apis/bot/v2/hook/REDACTED"},
		{"https://open.larksuite.com/open-apis/bot/v2/hook/tok-123/?x=1",
			"https://open.larksuite.com/open-apis/bot/v2/hook/REDACTED/?x=1"},
		{"https://open.feishu.cn/open-apis/bot/hook/oldtoken", "https://open.feishu.cn/open-apis/bot/hook/REDACTED"},
		{"https://oapi.dingtalk.com/robot/sendBySession?session=sess-SECRET",
			"https://oapi.dingtalk.com/robot/sendBySession?session=REDACTED"},
		{"https://open.feishu.cn/open-apis/bot/v2/hook/", "https://open.feishu.cn/open-apis/bot/v2/hook/"},
		// One-time codes: WeChat's mini-program login code, WeCom's
		// permanent and pre-auth codes, DingTalk's temporary auth code.
		{"https://api.weixin.qq.com/sns/jscode2session?appid=wx1&secret=S&js_code=LOGIN123&grant_type=authorization_code",
			"https://api.weixin.qq.com/sns/jscode2session?appid=wx1&secret=REDACTED&js_code=REDACTED&grant_type=authorization_code"},
		{"https://x.example/a?permanent_code=P&pre_auth_code=Q&tmp_auth_code=R&authCode=S",
			"https://x.example/a?permanent_code=REDACTED&pre_auth_code=REDACTED&tmp_auth_code=REDACTED&authCode=REDACTED"},
		{"https://open.feishu.cn/open-apis/im/v1/messages?receive_id_type=chat_id",
			"https://open.feishu.cn/open-apis/im/v1/messages?receive_id_type=chat_id"},
	}
	for _, tt := range tests {
		u, err := url.Parse(tt.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := throttle.RedactURL(u); got != tt.want {
			t.Errorf("RedactURL(%s)\n got %s\nwant %s", tt.in, got, tt.want)
		}
	}
	if got := throttle.RedactURL(nil); got != "" {
		t.Errorf("RedactURL(nil) = %q", got)
	}
}

// The error of a throttled call through http.Client quotes the URL with its
// token; the redacted one does not, and still matches the sentinels.
func TestRedactErrorOfAThrottledCall(t *testing.T) {
	srv := serve(t, &recorder{})
	c := &http.Client{Transport: throttle.MustNew(throttle.WithProfiles(testProfile("p", mustRule(t, 1, 10*time.Second))),
		throttle.WithMaxWait(0), throttle.WithoutTelemetry())}
	u := srv.URL + "/topapi/v2/user/get?access_token=tok-SECRET&corpsecret=cs-SECRET"
	if _, err := get(context.Background(), c, u); err != nil {
		t.Fatal(err)
	}
	_, err := get(context.Background(), c, u)
	if !strings.Contains(err.Error(), "tok-SECRET") {
		t.Fatalf("err = %v: expected http.Client to quote the URL", err)
	}
	red := throttle.RedactError(err)
	if text := red.Error(); strings.Contains(text, "SECRET") || !strings.Contains(text, "access_token=REDACTED") {
		t.Errorf("redacted text %q still carries a credential", text)
	}
	var uerr *url.Error
	var te *throttle.ThrottledError
	if !errors.Is(red, throttle.ErrThrottled) || !errors.As(red, &uerr) || !errors.As(red, &te) {
		t.Errorf("redacted error %v lost its chain", red)
	}
	if throttle.RedactError(nil) != nil {
		t.Error("RedactError(nil) is not nil")
	}
	plain := errors.New("no url here")
	if throttle.RedactError(plain) != plain {
		t.Error("an error without a credential was wrapped")
	}
}

// A failed call to a Feishu bot webhook quotes its token in the path.
func TestRedactErrorOfABotHook(t *testing.T) {
	u := "https://open.feishu.cn/open-apis/bot/v2/hook/hook-SECRET-token"
	err := &url.Error{Op: "Post", URL: u, Err: throttle.ErrThrottled}
	red := throttle.RedactError(err)
	if text := red.Error(); strings.Contains(text, "SECRET") || !strings.Contains(text, "/hook/REDACTED") {
		t.Errorf("redacted text %q still carries the hook's token", text)
	}
	if !errors.Is(red, throttle.ErrThrottled) {
		t.Errorf("redacted error %v lost its chain", red)
	}
}

func FuzzRedactText(f *testing.F) {
	f.Add("Get \"https://x/a?access_token=abc&b=c\": throttle: refused")
	f.Add("https://u:p@h/?sign=1&sign=2#frag")
	f.Add("Post \"https://open.feishu.cn/open-apis/bot/v2/hook/abc/def?key=1\": x")
	f.Fuzz(func(t *testing.T, s string) {
		got := throttle.RedactError(errors.New(s)).Error()
		if occursFree(s, "access_token=", nil) && !strings.Contains(got, "access_token=") {
			t.Fatalf("the parameter's name went missing: %q -> %q", s, got)
		}
		if occursFree(s, "/bot/v2/hook/", tokenOfHook) && !strings.Contains(got, "/bot/v2/hook/") {
			t.Fatalf("the hook's path went missing: %q -> %q", s, got)
		}
		if again := throttle.RedactError(errors.New(got)).Error(); again != got {
			t.Fatalf("redacting twice changed the text: %q -> %q -> %q", s, got, again)
		}
	})
}

// occursFree reports whether sub occurs in s outside every query
// parameter's value (inside one, "&token=access_token=", a credential's
// name blanks it whole, as it should) and, with also, where also(the text
// before it and its first byte) is false.
func occursFree(s, sub string, also func(prefix string) bool) bool {
	for at := 0; ; {
		i := strings.Index(s[at:], sub)
		if i < 0 {
			return false
		}
		if at += i; !inQueryValue(s[:at]) && (also == nil || !also(s[:at+1])) {
			return true
		}
		at++
	}
}

// tokenOfHook reports whether the path segment after prefix is a bot
// webhook's token ("/bot/hook/" + "bot/v2/hook/..."), which is blanked
// whole: the path it starts is no path of the URL.
func tokenOfHook(prefix string) bool {
	p := strings.ToLower(prefix)
	return strings.HasSuffix(p, "/bot/hook/") || strings.HasSuffix(p, "/bot/v2/hook/")
}

// inQueryValue reports whether text that follows prefix would be inside a
// query parameter's value ("&key=/bot/v2/hook/": the value of key, which a
// credential's name blanks whole, whatever it holds). A value runs to the
// first byte that ends one (redact.go's endsValue): a '?' after the '='
// is part of it ("&key=?/bot/v2/hook/").
func inQueryValue(prefix string) bool {
	start := strings.LastIndexAny(prefix, "&# \"'>);,\n\r\t")
	return strings.Contains(prefix[start+1:], "=")
}

// A reporter that walks the chain and records every error's text (as error
// trackers do) reads no credential, through a wrapper of the SDK's and
// through errors.Join; errors.Is and errors.As still find what the chain
// holds, a *url.Error (or a net.Error) with its URL redacted.
func TestRedactErrorCleansTheWholeChain(t *testing.T) {
	inner := &url.Error{Op: "Post", URL: "https://api.weixin.qq.com/cgi-bin/x?access_token=tok-SECRET", Err: throttle.ErrThrottled}
	sdk := fmt.Errorf("send message: %w", inner)
	joined := errors.Join(errors.New("first try failed"), sdk)
	for name, err := range map[string]error{"url.Error": inner, "an SDK's wrapper": sdk, "errors.Join": joined} {
		red := throttle.RedactError(err)
		var texts []string
		var walk func(error)
		walk = func(e error) {
			if e == nil {
				return
			}
			texts = append(texts, e.Error())
			switch u := e.(type) {
			case interface{ Unwrap() error }:
				walk(u.Unwrap())
			case interface{ Unwrap() []error }:
				for _, x := range u.Unwrap() {
					walk(x)
				}
			}
		}
		walk(red)
		if len(texts) < 2 {
			t.Errorf("%s: walked %d errors, want the chain", name, len(texts))
		}
		for _, text := range texts {
			if strings.Contains(text, "SECRET") {
				t.Errorf("%s: an error of the redacted chain reads %q", name, text)
			}
		}
		var uerr *url.Error
		var nerr net.Error
		if !errors.Is(red, throttle.ErrThrottled) || !errors.As(red, &uerr) || !errors.As(red, &nerr) {
			t.Errorf("%s: redacted error %v lost its chain", name, red)
			continue
		}
		if strings.Contains(uerr.URL, "SECRET") || strings.Contains(nerr.Error(), "SECRET") {
			t.Errorf("%s: errors.As found %q, %q", name, uerr.URL, nerr.Error())
		}
		if !strings.Contains(err.Error(), "tok-SECRET") {
			t.Errorf("%s: the original was changed: %v", name, err)
		}
	}
}

// chainAs is an error whose As hands over an error of its own chain, as
// go-multierror's does.
type chainAs struct{ errs []error }

func (c chainAs) Error() string { return "2 errors occurred" }
func (c chainAs) As(target any) bool {
	for _, e := range c.errs {
		if errors.As(e, target) {
			return true
		}
	}
	return false
}

// loop is an error whose Unwrap returns itself, with a clean text.
type loop struct{}

func (l *loop) Error() string { return "loop" }
func (l *loop) Unwrap() error { return l }

// Odd chains: an error whose own As hands over the raw *url.Error, a nil
// *url.Error wrapped with %w (RedactError and As do not panic on it, as As
// does not on the original), a chain that loops (walked). None hands a
// credential over.
func TestRedactErrorOddChains(t *testing.T) {
	raw := &url.Error{Op: "Get", URL: "https://x/a?access_token=tok-SECRET", Err: errors.New("refused")}
	var uerr *url.Error
	if red := throttle.RedactError(chainAs{[]error{errors.New("first"), raw}}); !errors.As(red, &uerr) || strings.Contains(uerr.URL, "SECRET") {
		t.Errorf("As through the error's own As: %v", uerr)
	}
	nilURL := fmt.Errorf("send ?access_token=tok-SECRET: %w", (*url.Error)(nil))
	red := throttle.RedactError(nilURL)
	if strings.Contains(red.Error(), "SECRET") {
		t.Errorf("a nil *url.Error in the chain: %q", red.Error())
	}
	uerr = nil
	errors.As(red, &uerr) // must not panic, as it does not on the original
	looped := fmt.Errorf("call ?access_token=tok-SECRET: %w", &loop{})
	red = throttle.RedactError(looped)
	if strings.Contains(red.Error(), "SECRET") {
		t.Errorf("a chain that loops: %q", red.Error())
	}
	for e, i := error(red), 0; e != nil && i < 5; e, i = errors.Unwrap(e), i+1 {
		if strings.Contains(e.Error(), "SECRET") {
			t.Errorf("a chain that loops, unwrapped %d times: %q", i, e.Error())
		}
	}
}
