package main

import (
	"os"
	"strings"
	"testing"
)

// TestMain lets a job of a test run this test binary as the gpuq CLI:
// GPUQ_AS_CLI=1 <test binary> checkpoint --ref R (testBinary).
func TestMain(m *testing.M) {
	if os.Getenv("GPUQ_AS_CLI") == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// testBinary is this test binary, which runs as gpuq with GPUQ_AS_CLI=1.
func testBinary(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
