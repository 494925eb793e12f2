package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
)

// source is one SDK module read for templates. Bump Version to refresh.
type source struct{ Module, Version string }

var (
	larkSDK       = source{"github.com/larksuite/oapi-sdk-go/v3", "v3.4.22"}
	dingtalkSDK   = source{"github.com/alibabacloud-go/dingtalk", "v1.6.88"}
	dingtalkOapi  = source{"github.com/zhaoyunxing92/dingtalk/v2", "v2.1.0"}
	wechatSDK     = source{"github.com/silenceper/wechat/v2", "v2.1.9"}
	workwxSDK     = source{"github.com/xen0n/go-workwx", "v1.6.0"}
	sources       = []source{larkSDK, dingtalkSDK, dingtalkOapi, wechatSDK, workwxSDK}
	wechatHost    = "https://api.weixin.qq.com/"
	wecomHost     = "https://qyapi.weixin.qq.com/"
	newDingTalkRe = []string{"/v1.0/", "/v2.0/"}
)

type reader struct {
	src source
	fn  func(dir string) ([]string, error)
}

type preset struct {
	name  string
	reads []reader
	facts []string
}

var presets = []preset{
	{"dingtalk", []reader{{dingtalkSDK, readTeaParams}, {dingtalkOapi, readOapiConsts}}, dingtalkFacts},
	{"wechat", []reader{{wechatSDK, readURLs(wechatHost)}}, wechatFacts},
	{"wecom", []reader{{wechatSDK, readURLs(wecomHost)}, {workwxSDK, readCgiBinLiterals}}, wecomFacts},
	{"feishu", []reader{{larkSDK, readLarkAPIs}}, feishuFacts},
}

// goFiles parses every non-test Go file under dir and calls fn with each.
func goFiles(dir string, fn func(*ast.File)) error {
	fset := token.NewFileSet()
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != dir && (name == "testdata" || name == "sample" || name == "example" || name == "examples" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		fn(f)
		return nil
	})
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// readLarkAPIs reads the Lark SDK's service methods, each of which sets
// apiReq.ApiPath = "/open-apis/..." and apiReq.HttpMethod = http.MethodX.
func readLarkAPIs(dir string) ([]string, error) {
	var out []string
	err := goFiles(filepath.Join(dir, "service"), func(f *ast.File) {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			var path, method string
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				as, ok := n.(*ast.AssignStmt)
				if !ok || len(as.Lhs) != 1 || len(as.Rhs) != 1 {
					return true
				}
				sel, ok := as.Lhs[0].(*ast.SelectorExpr)
				if !ok {
					return true
				}
				switch sel.Sel.Name {
				case "ApiPath":
					path, _ = stringLit(as.Rhs[0])
				case "HttpMethod":
					if m, ok := as.Rhs[0].(*ast.SelectorExpr); ok {
						method = strings.ToUpper(strings.TrimPrefix(m.Sel.Name, "Method"))
					}
				}
				return true
			})
			if method != "" && validPath(path) && strings.HasPrefix(path, "/open-apis/") {
				out = append(out, method+" "+path)
			}
		}
	})
	return out, err
}

// readTeaParams reads the new DingTalk API's clients: every call builds
// &openapi.Params{Pathname: tea.String("/v1.0/a/" + tea.StringValue(id)),
// Method: tea.String("GET"), ...}.
func readTeaParams(dir string) ([]string, error) {
	var out []string
	err := goFiles(dir, func(f *ast.File) {
		ast.Inspect(f, func(n ast.Node) bool {
			cl, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			var path, method string
			for _, el := range cl.Elts {
				kv, ok := el.(*ast.KeyValueExpr)
				if !ok {
					continue
				}
				key, ok := kv.Key.(*ast.Ident)
				if !ok {
					continue
				}
				switch key.Name {
				case "Pathname":
					path = teaPath(kv.Value)
				case "Method":
					method = teaPath(kv.Value)
				}
			}
			if method != "" && validPath(path) {
				out = append(out, strings.ToUpper(method)+" "+path)
			}
			return true
		})
	})
	return out, err
}

// teaPath renders tea.String("/a/" + tea.StringValue(id) + "/b") as
// "/a/{id}/b".
func teaPath(e ast.Expr) string {
	call, ok := e.(*ast.CallExpr)
	if !ok || len(call.Args) != 1 {
		return ""
	}
	var b strings.Builder
	var walk func(ast.Expr) bool
	walk = func(e ast.Expr) bool {
		switch x := e.(type) {
		case *ast.BinaryExpr:
			return x.Op == token.ADD && walk(x.X) && walk(x.Y)
		case *ast.BasicLit:
			s, ok := stringLit(x)
			b.WriteString(s)
			return ok
		case *ast.CallExpr:
			if len(x.Args) == 1 {
				if id, ok := x.Args[0].(*ast.Ident); ok {
					b.WriteString("{" + id.Name + "}")
					return true
				}
			}
		case *ast.ParenExpr:
			return walk(x.X)
		}
		return false
	}
	if !walk(call.Args[0]) {
		return ""
	}
	return b.String()
}

// readOapiConsts reads the old DingTalk API's paths, string constants of
// the zhaoyunxing92 SDK ("/topapi/v2/user/get"); new-API paths come from
// the official SDK instead.
func readOapiConsts(dir string) ([]string, error) {
	var out []string
	err := goFiles(filepath.Join(dir, "constant"), func(f *ast.File) {
		ast.Inspect(f, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for _, v := range vs.Values {
				s, ok := stringLit(v)
				if !ok || !validPath(s) {
					continue
				}
				isNew := false
				for _, p := range newDingTalkRe {
					isNew = isNew || strings.HasPrefix(s, p)
				}
				if !isNew {
					out = append(out, s)
				}
			}
			return true
		})
	})
	return out, err
}

// readURLs returns the paths of every string literal that starts with
// host, cut at the query; URLs whose path is built with format verbs are
// skipped.
func readURLs(host string) func(string) ([]string, error) {
	return func(dir string) ([]string, error) {
		var out []string
		err := goFiles(dir, func(f *ast.File) {
			ast.Inspect(f, func(n ast.Node) bool {
				s, ok := stringLit(asExpr(n))
				if !ok || !strings.HasPrefix(s, host) {
					return true
				}
				p := "/" + strings.TrimPrefix(s, host)
				if i := strings.IndexByte(p, '?'); i >= 0 {
					p = p[:i]
				}
				if validPath(p) {
					out = append(out, p)
				}
				return true
			})
		})
		return out, err
	}
}

// readCgiBinLiterals returns go-workwx's paths, string literals such as
// "/cgi-bin/user/get" passed to its executeQyapi* helpers.
func readCgiBinLiterals(dir string) ([]string, error) {
	var out []string
	err := goFiles(dir, func(f *ast.File) {
		ast.Inspect(f, func(n ast.Node) bool {
			s, ok := stringLit(asExpr(n))
			if ok && strings.HasPrefix(s, "/cgi-bin/") && validPath(s) {
				out = append(out, s)
			}
			return true
		})
	})
	return out, err
}

func asExpr(n ast.Node) ast.Expr {
	e, _ := n.(ast.Expr)
	return e
}
