package jsoncode

import (
	"testing"
)

func TestParseJSONCode(t *testing.T) {
	tests := []struct {
		name string
		body string
		ok   bool
		want Code
	}{
		{"old api error", `{"errcode":90018,"errmsg":"处罚将在 2019-02-13 20:40:05 结束."}`, true,
			Code{Code: "90018", HasCode: true, CodeKey: "errcode", Message: "处罚将在 2019-02-13 20:40:05 结束."}},
		{"topapi wrapper", `{"errcode":88,"sub_code":"90018","sub_msg":"too fast","errmsg":"ding talk error[subcode=90018]","request_id":"x"}`, true,
			Code{Code: "88", HasCode: true, CodeKey: "errcode", SubCode: "90018", Message: "ding talk error[subcode=90018]", SubMsg: "too fast"}},
		{"new api error", `{"code":"Forbidden.AccessDenied.QpsLimitForAppkeyAndApi","message":"m","requestid":"r"}`, true,
			Code{Code: "Forbidden.AccessDenied.QpsLimitForAppkeyAndApi", HasCode: true, CodeIsString: true, CodeKey: "code", Message: "m"}},
		{"feishu", `{"code":99991400,"msg":"request trigger frequency limit"}`, true,
			Code{Code: "99991400", HasCode: true, CodeKey: "code", Message: "request trigger frequency limit"}},
		{"errcode wins over code", `{"code":"x","errcode":0,"errmsg":"ok"}`, true,
			Code{Code: "0", HasCode: true, CodeKey: "errcode", Message: "ok"}},
		{"errmsg wins over message", `{"message":"a","errmsg":"b","msg":"c"}`, true, Code{Message: "b"}},
		{"success with digits elsewhere", `{"errcode":0,"errmsg":"ok","id":90018}`, true,
			Code{Code: "0", HasCode: true, CodeKey: "errcode", Message: "ok"}},
		{"nested code ignored", `{"result":{"errcode":90018,"code":"x"},"ok":true}`, true, Code{}},
		{"array before", `{"list":[{"errcode":1},"]}"],"errcode":-1}`, true, Code{Code: "-1", HasCode: true, CodeKey: "errcode"}},
		{"escapes", `{"errmsg":"a\"b\\c\u4e2d\ud83d\ude00\/\n"}`, true, Code{Message: "a\"b\\c中😀/\n"}},
		{"bad escape", `{"errmsg":"a\x\u12"}`, true, Code{Message: "a\uFFFD\uFFFD12"}},
		{"whitespace and BOM", "\xEF\xBB\xBF \n{ \"errcode\" : 90002 , \"errmsg\" : \"x\" }", true,
			Code{Code: "90002", HasCode: true, CodeKey: "errcode", Message: "x"}},
		{"null code", `{"errcode":null}`, true, Code{HasCode: true, CodeKey: "errcode"}},
		{"truncated number", `{"errcode":9001`, true, Code{}},
		{"truncated message", `{"errcode":90018,"errmsg":"处罚将在 2019`, true, Code{Code: "90018", HasCode: true, CodeKey: "errcode"}},
		{"truncated key", `{"errcode":90018,"errm`, true, Code{Code: "90018", HasCode: true, CodeKey: "errcode"}},
		{"empty object", `{}`, true, Code{}},
		{"not json", `<html>busy</html>`, false, Code{}},
		{"array", `[1,2]`, false, Code{}},
		{"empty", ``, false, Code{}},
		{"syntax error stops", `{"a" 1, "errcode": 5}`, true, Code{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Parse([]byte(tt.body))
			if ok != tt.ok || got != tt.want {
				t.Fatalf("Parse(%q) = %+v, %v, want %+v, %v", tt.body, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestScanJSONStops(t *testing.T) {
	var keys []string
	Scan([]byte(`{"a":1,"b":{"x":[1,{"y":"}"}]},"c":"d","e":true}`), func(k []byte, kind ValueKind, v []byte) bool {
		keys = append(keys, string(k)+"="+string(kind)+string(v))
		return string(k) != "c"
	})
	want := []string{"a=l1", `b=o{"x":[1,{"y":"}"}]}`, "c=sd"}
	if len(keys) != len(want) {
		t.Fatalf("got %q, want %q", keys, want)
	}
	for i := range want {
		if keys[i] != want[i] {
			t.Fatalf("got %q, want %q", keys, want)
		}
	}
}

// Every prefix of a body parses without panicking and reports only complete
// members.
func TestParseJSONCodePrefixes(t *testing.T) {
	body := `{"errcode":88,"sub_code":"90018","sub_msg":"\u9650\u6d41","errmsg":"x","data":{"a":[1,2,"]"]}}`
	for i := range len(body) + 1 {
		c, _ := Parse([]byte(body[:i]))
		if c.HasCode && c.Code != "88" || c.SubCode != "" && c.SubCode != "90018" {
			t.Fatalf("prefix %q read as %+v", body[:i], c)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"errcode":88,"sub_code":"90018","errmsg":"\ud83d"}`))
	f.Add([]byte(`{"code":"Forbidden.AccessDenied.QpsLimitForApi"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		Parse(b)
	})
}
