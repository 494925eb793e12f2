package dingtalktest

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
)

// tokenPaths are the token endpoints: an app's (both generations) and an
// ISV suite's for one customer org (both generations). The newer form of an
// app's, POST /v1.0/oauth2/{corpId}/token, is told by isTokenPath.
var tokenPaths = map[string]bool{
	"/gettoken": true, "/v1.0/oauth2/accessToken": true,
	"/service/get_corp_token": true, "/v1.0/oauth2/corpAccessToken": true,
}

// isTokenPath reports whether path is a token endpoint.
func isTokenPath(path string) bool {
	_, newer := corpOfTokenPath(path)
	return tokenPaths[path] || newer
}

// corpOfTokenPath returns the organisation of an app's token call of the
// newer form, /v1.0/oauth2/{corpId}/token.
func corpOfTokenPath(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, "/v1.0/oauth2/")
	if !ok {
		return "", false
	}
	corp, ok := strings.CutSuffix(rest, "/token")
	return corp, ok && corp != "" && !strings.Contains(corp, "/")
}

// holder is whose a token is: an app, or an ISV suite in a customer org.
// corp is the organisation an app's token of the newer form names: the one
// whose monthly quota its calls count in.
type holder struct{ app, org, corp string }

// tokenRequest is the credentials of a token call; org is the customer org
// of an ISV suite's call, corp the organisation of an app's call of the
// newer form.
type tokenRequest struct{ key, secret, org, corp string }

// readCreds reads the credentials: query parameters on the old API's
// GET /gettoken, a JSON body on the new API's POST /v1.0/oauth2/accessToken
// and the ISV calls (the old one names the suite in the query accessKey;
// the emulator takes its signature on trust).
func readCreds(r *http.Request) tokenRequest {
	q := r.URL.Query()
	if r.URL.Path == "/gettoken" {
		// appkey and appsecret, or the legacy corpid and corpsecret that
		// older SDKs still send.
		if !q.Has("appkey") && q.Has("corpid") {
			return tokenRequest{key: q.Get("corpid"), secret: q.Get("corpsecret")}
		}
		return tokenRequest{key: q.Get("appkey"), secret: q.Get("appsecret")}
	}
	var body struct {
		AppKey      string `json:"appKey"`
		AppSecret   string `json:"appSecret"`
		SuiteKey    string `json:"suiteKey"`
		SuiteSecret string `json:"suiteSecret"`
		AuthCorpID  string `json:"authCorpId"`
		OldCorpID   string `json:"auth_corpid"`
		ClientID    string `json:"client_id"`
		Secret      string `json:"client_secret"`
	}
	_ = json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&body)
	switch r.URL.Path {
	case "/v1.0/oauth2/corpAccessToken":
		return tokenRequest{key: body.SuiteKey, secret: body.SuiteSecret, org: body.AuthCorpID}
	case "/service/get_corp_token":
		return tokenRequest{key: q.Get("accessKey"), secret: q.Get("signature"), org: body.OldCorpID}
	}
	if corp, ok := corpOfTokenPath(r.URL.Path); ok {
		return tokenRequest{key: body.ClientID, secret: body.Secret, corp: corp}
	}
	return tokenRequest{key: body.AppKey, secret: body.AppSecret}
}

// issueToken answers a token call and remembers whose the token is. Called
// with the lock held.
func (s *Server) issueToken(path string, c tokenRequest, rec *Record) answer {
	old := !strings.HasPrefix(path, "/v1.0/")
	isv := path == "/v1.0/oauth2/corpAccessToken" || path == "/service/get_corp_token"
	valid := c.key != "" && c.secret != ""
	switch {
	case isv && c.org == "":
		valid = false
	case isv && s.opts.Suites != nil:
		secret, ok := s.opts.Suites[c.key]
		valid = ok && (secret == c.secret || path == "/service/get_corp_token")
	case !isv && s.opts.Apps != nil:
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
	// DingTalk returns the same token within its lifetime (a repeat
	// extends it): one per app, org and API generation.
	kind := path + "\x00" + c.key + "\x00" + c.org // the newer form: the path names the corp
	if old {
		kind = "old\x00" + c.key + "\x00" + c.org
	}
	tok, ok := s.issued[kind]
	if !ok {
		tok = requestID() + requestID()
		if s.issued == nil {
			s.issued = map[string]string{}
		}
		s.issued[kind] = tok
	}
	s.tokens[tok] = holder{app: c.key, org: c.org, corp: c.corp}
	rec.App, rec.Org = c.key, c.org
	switch {
	case path == "/service/get_corp_token":
		// Documented without errcode, unlike gettoken.
		return jsonAnswer(http.StatusOK, "", `{"access_token":"`+tok+`","expires_in":7200}`)
	case old:
		return jsonAnswer(http.StatusOK, "", `{"errcode":0,"errmsg":"ok","access_token":"`+tok+`","expires_in":7200}`)
	case c.corp != "":
		return jsonAnswer(http.StatusOK, "", `{"access_token":"`+tok+`","expires_in":7200}`)
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
