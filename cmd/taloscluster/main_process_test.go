package main

import (
	"context"
	"os"
	"testing"
)

// envRunMain makes the test binary run the command line instead of the
// tests, so a test can start the real CLI as a process of its own (and
// kill it) without building it first.
const envRunMain = "TALOSCLUSTER_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envRunMain) == "1" {
		os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}
