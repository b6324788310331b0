package watertightslog_test

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/watertightslog"
)

// BenchmarkOnEvent is the cost of one event: a per-call one (a rejection)
// below the handler's level, the same one written by a TextHandler to
// io.Discard, and a state change.
func BenchmarkOnEvent(b *testing.B) {
	rejected := watertight.Event{Kind: watertight.EventRejected, Source: "circuit", Name: "payments", Err: circuit.ErrOpen, Time: time.Now()}
	opened := watertight.Event{Kind: watertight.EventStateChange, Source: "circuit", Name: "payments", From: "closed", To: "open",
		Reason: "failure rate 60% >= 50% over 20 calls", Delay: 30 * time.Second, Time: time.Now()}
	text := func(level slog.Level) *slog.Logger {
		return slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: level}))
	}
	for _, tc := range []struct {
		name   string
		logger *slog.Logger
		e      watertight.Event
	}{
		{"rejected-disabled", text(slog.LevelInfo), rejected},
		{"rejected-text", text(slog.LevelDebug), rejected},
		{"opened-text", text(slog.LevelInfo), opened},
	} {
		l := watertightslog.NewListener(tc.logger, watertightslog.Options{})
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				l.OnEvent(tc.e)
			}
		})
		b.Run(tc.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					l.OnEvent(tc.e)
				}
			})
		})
	}
}
