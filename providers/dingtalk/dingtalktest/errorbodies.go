package dingtalktest

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// answer is what the handler writes.
type answer struct {
	status int
	ctype  string
	body   string
	code   string
}

func (s *Server) banAnswer() answer {
	if s.opts.BanHTML {
		return answer{status: http.StatusOK, ctype: "text/html; charset=utf-8", code: "ip-ban", body: banHTML}
	}
	return answer{status: http.StatusOK, ctype: "application/json", code: "ip-ban",
		body: `{"status":1111,"wait":5,"source":"x5","punish":"deny","uuid":"` + requestID() + `"}`}
}

// beijing is the time zone of DingTalk's clock, in which its penalty ends
// are written and its monthly quotas reset: UTC+8, without daylight saving.
// The emulator's own, not the preset's, so that a preset that reads the
// zone wrong is caught.
var beijing = time.FixedZone("CST", 8*3600)

// banHTML is the shape of the gateway's anti-abuse page.
const banHTML = `<!DOCTYPE html><html><head><meta charset="utf-8"><title>访问被拒绝</title></head>` +
	`<body><div id="x5sec">您的访问过于频繁，请稍后再试</div>` +
	`<script>window._config_={"action":"deny","url":"/_____tmd_____/punish"};</script></body></html>`

func qpsAnswer(now time.Time, newAPI bool, path string, isv bool) answer {
	if isv {
		if newAPI {
			return jsonAnswer(http.StatusForbidden, "Forbidden.AccessDenied.QpsLimitForSuitekeyAndOrgAndApi",
				`{"code":"Forbidden.AccessDenied.QpsLimitForSuitekeyAndOrgAndApi","message":"The request has exceeded the QPS limit of the suitekey, org and api: apiPath(`+path+`)","requestid":"`+requestID()+`"}`)
		}
		end := now.Truncate(time.Second).Add(time.Second).In(beijing).Format("2006-01-02 15:04:05")
		return wrapOld(path, "90019", "当前套件在该企业调用该接口的频率已超过限制, 处罚将在 "+end+" 结束.")
	}
	if newAPI {
		return jsonAnswer(http.StatusForbidden, "Forbidden.AccessDenied.QpsLimitForAppkeyAndApi",
			`{"code":"Forbidden.AccessDenied.QpsLimitForAppkeyAndApi","message":"The request has exceeded the QPS limit of the appkey and api: apiPath(`+path+`)","requestid":"`+requestID()+`"}`)
	}
	end := now.Truncate(time.Second).Add(time.Second).In(beijing).Format("2006-01-02 15:04:05")
	return wrapOld(path, "90018", "当前应用调用该接口的频率已超过限制, 处罚将在 "+end+" 结束.")
}

// allAnswer refuses a call by the limit on all callers of one API: every
// request of this server to the API is suspended for now (90002).
func allAnswer(newAPI bool, path string) answer {
	if newAPI {
		return jsonAnswer(http.StatusForbidden, "Forbidden.AccessDenied.QpsLimitForApi",
			`{"code":"Forbidden.AccessDenied.QpsLimitForApi","message":"The request has exceeded the QPS limit of the api: apiPath(`+path+`)","requestid":"`+requestID()+`"}`)
	}
	return wrapOld(path, "90002", "您的服务器调用钉钉开放平台当前接口的所有请求都被暂时禁用了")
}

// wrapOld writes an old-API error: plain errcode, or under /topapi the
// errcode 88 wrapper with sub_code.
func wrapOld(path, code, msg string) answer {
	if strings.HasPrefix(path, "/topapi/") {
		return jsonAnswer(http.StatusOK, code, fmt.Sprintf(
			`{"errcode":88,"sub_code":%q,"sub_msg":%s,"errmsg":%s,"request_id":%q}`,
			code, quote(msg), quote("ding talk error[subcode="+code+",submsg="+msg+"]"), requestID()))
	}
	return jsonAnswer(http.StatusOK, code, fmt.Sprintf(`{"errcode":%s,"errmsg":%s}`, code, quote(msg)))
}

func faultAnswer(f fault, newAPI bool) answer {
	if f.busy {
		if newAPI {
			return jsonAnswer(http.StatusTooManyRequests, "system.busy", `{"code":"system.busy","message":"系统繁忙","requestid":"`+requestID()+`"}`)
		}
		return jsonAnswer(http.StatusOK, "-1", `{"errcode":-1,"errmsg":"系统繁忙"}`)
	}
	a := jsonAnswer(f.status, "", f.body)
	// The code it is counted under (Stats): the new API's "code", else the
	// old API's "errcode".
	var v struct{ Code, Errcode json.RawMessage }
	if json.Unmarshal([]byte(f.body), &v) == nil {
		for _, raw := range []json.RawMessage{v.Code, v.Errcode} {
			if c := strings.Trim(string(raw), `"`); c != "" && c != "null" {
				a.code = c
				break
			}
		}
	}
	if a.code == "" {
		a.code = fmt.Sprint(f.status)
	}
	return a
}

func jsonAnswer(status int, code, body string) answer {
	return answer{status: status, ctype: "application/json;charset=UTF-8", body: body, code: code}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func requestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
