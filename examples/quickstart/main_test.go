package main

import (
	"bytes"
	"flag"
	"io"
	"os"
	"regexp"
	"testing"
)

// The quick start runs as written against the emulator: 30 calls, none
// rejected by the provider.
func TestQuickstartAgainstTheEmulator(t *testing.T) {
	oldArgs, oldOut := os.Args, os.Stdout
	defer func() { os.Args, os.Stdout = oldArgs, oldOut }()
	flag.CommandLine = flag.NewFlagSet("quickstart", flag.ExitOnError)
	os.Args = []string{"quickstart", "-emulator"}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	os.Stdout = w
	main()
	w.Close()
	var out bytes.Buffer
	io.Copy(&out, r)
	if !regexp.MustCompile(`^30 calls in .* 0 rejected by DingTalk for a limit, 0 other errors\n$`).Match(out.Bytes()) {
		t.Fatalf("output %q", out.String())
	}
}

// Only a limit's refusal counts as one: a wrong token or a permission the
// app lacks is another error.
func TestLimitedReadsTheCode(t *testing.T) {
	for _, c := range []struct {
		status int
		body   string
		want   bool
	}{
		{429, `{"code":"Forbidden.AccessDenied.QpsLimitForApi"}`, true},
		{429, `{"code":"system.busy"}`, false},
		{403, `{"code":"Forbidden.AccessDenied.QpsLimitForAppkeyAndApi"}`, true},
		{403, `{"code":"Forbidden.AccessDenied.AccessTokenPermissionDenied"}`, false},
		{401, `{"code":"InvalidAuthentication"}`, false},
		{404, `{}`, false},
	} {
		if got := limited(c.status, []byte(c.body)); got != c.want {
			t.Errorf("limited(%d, %s) = %v, want %v", c.status, c.body, got, c.want)
		}
	}
}
