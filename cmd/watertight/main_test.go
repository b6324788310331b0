package main

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the command itself when WATERTIGHT_TEST_MAIN is 1, so that
// tests can start it as a real process (os.Args[0] with the command's
// arguments); otherwise it runs the tests.
func TestMain(m *testing.M) {
	if os.Getenv("WATERTIGHT_TEST_MAIN") == "1" {
		main()
		return
	}
	goleak.VerifyTestMain(m)
}
