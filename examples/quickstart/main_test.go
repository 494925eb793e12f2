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
	if !regexp.MustCompile(`^30 calls in .* 0 rejected by DingTalk\n$`).Match(out.Bytes()) {
		t.Fatalf("output %q", out.String())
	}
}
