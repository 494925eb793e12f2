package main

// Paths the SDKs above do not list, taken from the providers'
// documentation. Add an API here when a provider publishes one that no SDK
// calls yet.
var (
	dingtalkFacts = []string{
		"/gettoken",
		"/robot/send",
		"/user/get",
		"/user/getuserinfo",
		"/user/simplelist",
		"/user/listbypage",
		"/department/list",
		"/department/get",
		"/message/send_to_conversation",
		"/chat/send",
		"/topapi/message/corpconversation/asyncsend_v2",
		"/topapi/message/corpconversation/getsendprogress",
		"/topapi/message/corpconversation/getsendresult",
		"/topapi/message/corpconversation/recall",
		"/topapi/v2/department/get",
		"/topapi/v2/department/listsub",
		"/topapi/v2/department/listsubid",
		"/topapi/v2/user/getuserinfo",
		"/topapi/processinstance/create",
		"/topapi/processinstance/get",
		"/topapi/attendance/list",
		"/topapi/attendance/getupdatedata",
		"POST /v1.0/oauth2/accessToken",
		"POST /v1.0/oauth2/corpAccessToken",
		"GET /v1.0/contact/users/{unionId}",
		"GET /v1.0/contact/users/{unionId}/departments",
	}
	wechatFacts = []string{
		"/cgi-bin/token",
		"/cgi-bin/stable_token",
		"/cgi-bin/openapi/quota/get",
		"/cgi-bin/openapi/quota/clear",
		"/cgi-bin/clear_quota",
		"/cgi-bin/menu/create",
		"/cgi-bin/message/custom/send",
		"/cgi-bin/message/mass/sendall",
		"/cgi-bin/message/template/send",
		"/cgi-bin/user/info",
		"/cgi-bin/user/get",
		"/cgi-bin/qrcode/create",
		"/sns/jscode2session",
		"/wxa/getwxacodeunlimit",
		"/cgi-bin/message/subscribe/send",
	}
	wecomFacts = []string{
		"/cgi-bin/gettoken",
		"/cgi-bin/user/get",
		"/cgi-bin/user/list",
		"/cgi-bin/user/simplelist",
		"/cgi-bin/department/list",
		"/cgi-bin/message/send",
		"/cgi-bin/appchat/send",
		"/cgi-bin/webhook/send",
		"/cgi-bin/externalcontact/get",
		"/cgi-bin/externalcontact/list",
		"/cgi-bin/service/get_suite_token",
		"/cgi-bin/service/get_corp_token",
	}
	feishuFacts = []string{
		"POST /open-apis/auth/v3/tenant_access_token/internal",
		"POST /open-apis/auth/v3/app_access_token/internal",
		"POST /open-apis/im/v1/messages",
		"POST /open-apis/im/v1/messages/:message_id/reply",
		"POST /open-apis/message/v4/batch_send/",
		"GET /open-apis/contact/v3/users/:user_id",
		"POST /open-apis/im/v1/chats",
	}
)
