package main

import (
	"context"
	"io"

	"github.com/watertight-go/watertight/lab"
)

// runLabBackend is `watertight lab-backend`, a hidden command: one upstream
// of the lab's gateway scenario, which runs it (and `watertight proxy`) as
// processes of their own by re-executing this binary (lab.BackendMain has
// the flags). It is not in the usage: nobody runs it by hand.
func runLabBackend(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return lab.BackendMain(ctx, args, stdout, stderr)
}
