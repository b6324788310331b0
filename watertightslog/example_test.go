package watertightslog_test

import (
	"context"
	"errors"
	"log/slog"
	"os"

	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/watertightslog"
)

// A breaker that opens is logged at Warn; its rejections, at Debug, are
// below the handler's level and cost nothing but the level check.
func Example() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{} // no time, so that the output is the same on every run
			}
			return a
		},
	}))
	l := watertightslog.NewListener(logger, watertightslog.Options{})

	b, _ := circuit.New(circuit.Config{Name: "payments", WindowSize: 2, MinCalls: 2, OpenJitter: -1, Listener: l})
	for range 3 {
		_, _ = circuit.Call(context.Background(), b, func(context.Context) (int, error) {
			return 0, errors.New("connection refused")
		})
	}
	b.Reset()
	// Output:
	// level=WARN msg="watertight: state change" watertight.event=state_change watertight.source=circuit watertight.name=payments watertight.from=closed watertight.to=open watertight.reason="failure rate 100% >= 50% over 2 calls" watertight.code=failure_rate watertight.delay=30s
	// level=INFO msg="watertight: state change" watertight.event=state_change watertight.source=circuit watertight.name=payments watertight.from=open watertight.to=closed watertight.reason=reset watertight.code=manual
}
