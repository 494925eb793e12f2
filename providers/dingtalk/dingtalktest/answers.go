package dingtalktest

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
)

// tokenRequest is the credentials of a token call.
type tokenRequest struct{ key, secret string }

// readCreds reads the app's credentials: query parameters on the old API's
// GET /gettoken (appkey and appsecret, or the legacy corpid and corpsecret
// that older SDKs still send), a JSON body on the new API's
// POST /v1.0/oauth2/accessToken.
func readCreds(r *http.Request) tokenRequest {
	if r.URL.Path == "/gettoken" {
		q := r.URL.Query()
		if !q.Has("appkey") && q.Has("corpid") {
			return tokenRequest{q.Get("corpid"), q.Get("corpsecret")}
		}
		return tokenRequest{q.Get("appkey"), q.Get("appsecret")}
	}
	var body struct {
		AppKey    string `json:"appKey"`
		AppSecret string `json:"appSecret"`
	}
	_ = json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&body)
	return tokenRequest{body.AppKey, body.AppSecret}
}

// issueToken answers a token call and remembers the token's app. Called
// with the lock held.
func (s *Server) issueToken(old bool, c tokenRequest, rec *Record) answer {
	valid := c.key != "" && c.secret != ""
	if s.opts.Apps != nil {
		secret, ok := s.opts.Apps[c.key]
		valid = ok && secret == c.secret
	}
	if !valid {
		if old {
			return jsonAnswer(http.StatusOK, "40089", `{"errcode":40089,"errmsg":"不合法的appkey或appsecret"}`)
		}
		return jsonAnswer(http.StatusBadRequest, "invalidClientIdOrSecret",
			`{"code":"invalidClientIdOrSecret","message":"无效的clientId或者clientSecret","requestid":"`+requestID()+`"}`)
	}
	tok := requestID() + requestID()
	s.tokens[tok] = c.key
	rec.App = c.key
	if old {
		return jsonAnswer(http.StatusOK, "", `{"errcode":0,"errmsg":"ok","access_token":"`+tok+`","expires_in":7200}`)
	}
	return jsonAnswer(http.StatusOK, "", `{"accessToken":"`+tok+`","expireIn":7200}`)
}

// success answers an admitted call with a body shaped like the real API's
// for a few common endpoints, and a generic success otherwise.
func success(r *http.Request, newAPI bool) answer {
	path := r.URL.Path
	userID := r.URL.Query().Get("userid")
	if userID == "" {
		userID = "manager4220"
	}
	switch {
	case path == "/user/get":
		return jsonAnswer(http.StatusOK, "", `{"errcode":0,"errmsg":"ok","userid":`+quote(userID)+
			`,"unionid":"iPiSRG0zFZk1bGiPxNiS3ZdwiEiE","name":"张三","department":[1],"active":true}`)
	case path == "/topapi/v2/user/get":
		return jsonAnswer(http.StatusOK, "", `{"errcode":0,"errmsg":"ok","result":{"userid":`+quote(userID)+
			`,"unionid":"iPiSRG0zFZk1bGiPxNiS3ZdwiEiE","name":"张三","dept_id_list":[1],"active":true},"request_id":"`+requestID()+`"}`)
	case path == "/department/list":
		return jsonAnswer(http.StatusOK, "", `{"errcode":0,"errmsg":"ok","department":[`+
			`{"id":1,"name":"总部","parentid":0,"createDeptGroup":true,"autoAddUser":true},`+
			`{"id":2,"name":"研发部","parentid":1,"createDeptGroup":false,"autoAddUser":false}]}`)
	case strings.HasPrefix(path, "/v1.0/contact/users/") && r.Method == http.MethodGet && strings.Count(path, "/") == 4:
		id := strings.TrimPrefix(path, "/v1.0/contact/users/")
		return jsonAnswer(http.StatusOK, "", `{"nick":"张三","unionId":`+quote(id)+`,"openId":"openid123","mobile":"13800000000","stateCode":"86"}`)
	case path == "/v1.0/robot/oToMessages/batchSend" && r.Method == http.MethodPost:
		return jsonAnswer(http.StatusOK, "", `{"processQueryKey":"`+requestID()+`","invalidStaffIdList":[],"flowControlledStaffIdList":[]}`)
	case newAPI:
		return jsonAnswer(http.StatusOK, "", `{"success":true,"requestId":"`+requestID()+`"}`)
	}
	return jsonAnswer(http.StatusOK, "", `{"errcode":0,"errmsg":"ok","request_id":"`+requestID()+`"}`)
}

// defaultMeteredPaths are the APIs the emulator counts against the monthly
// quota unless Options.MeteredPaths says otherwise: the emulator's own copy
// of the platform's (unpublished) list as the preset guesses it.
var defaultMeteredPaths = []string{
	"/user/get",
	"/user/getuserinfo",
	"/department/list",
	"/topapi/v2/user/get",
	"/topapi/v2/user/list",
	"/topapi/v2/user/getuserinfo",
	"/topapi/v2/user/getbymobile",
	"/topapi/user/getbyunionid",
	"/topapi/user/listid",
	"/topapi/user/listsimple",
	"/topapi/v2/department/get",
	"/topapi/v2/department/listsub",
	"/topapi/v2/department/listsubid",
	"/v1.0/contact/users/{userId}",
	"/v1.0/contact/users/{unionId}/departments",
}
