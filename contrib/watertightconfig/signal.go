package watertightconfig

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// WatchSIGHUP reloads r from the file at path each time the process
// receives SIGHUP, the Unix convention for "read your configuration again",
// and calls onReload (if not nil) with what each reload did or the error
// that refused it — an invalid file leaves r as it was (see ReloadFrom).
// Reloads run one at a time in a goroutine of their own.
//
// The signal is being caught when WatchSIGHUP returns. Watching ends when
// ctx ends or stop is called; stop also waits for a reload in progress, and
// restores SIGHUP's default action (which ends the process) unless another
// caller of signal.Notify still catches it. A long-running command uses it
// as:
//
//	stop := watertightconfig.WatchSIGHUP(ctx, reg, path, func(ch watertightconfig.Changes, err error) {
//		if err != nil {
//			log.Printf("config: reload refused, keeping the old one:\n%v", err)
//			return
//		}
//		log.Printf("config: reloaded: %v", ch)
//	})
//	defer stop()
func WatchSIGHUP(ctx context.Context, r *Registry, path string, onReload func(Changes, error)) (stop func()) {
	return WatchSignals(ctx, r, path, onReload, syscall.SIGHUP)
}

// WatchSignals is WatchSIGHUP for other signals.
func WatchSignals(ctx context.Context, r *Registry, path string, onReload func(Changes, error), sigs ...os.Signal) (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sigs...)
	return watch(ctx, r, path, onReload, ch, func() { signal.Stop(ch) })
}

// watch reloads on every value of ch until ctx ends or stop is called.
func watch(ctx context.Context, r *Registry, path string, onReload func(Changes, error), ch <-chan os.Signal, cleanup func()) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer cleanup()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ch:
				c, err := r.ReloadFrom(path)
				if onReload != nil {
					onReload(c, err)
				}
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
}
