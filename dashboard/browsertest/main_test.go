package browsertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"
	"go.uber.org/goleak"
)

// TestMain runs the tests, stops the browser they shared, then checks that
// no goroutine leaked (goleak), which it can only do once the browser is
// gone.
func TestMain(m *testing.M) {
	code := m.Run()
	stopBrowser()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// chromiumPath is the browser to drive: $WATERTIGHT_CHROMIUM, or the first
// of Debian's chromium and its usual other names on PATH; "" if none.
func chromiumPath() string {
	if p := os.Getenv("WATERTIGHT_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// The one browser of the test binary; each test opens a tab of its own.
var browser struct {
	once        sync.Once
	ctx         context.Context
	cancel      context.CancelFunc
	cancelAlloc context.CancelFunc
	dir         string
	err         error
}

func startBrowser(path string) {
	dir, err := os.MkdirTemp("", "watertight-chromium-")
	if err != nil {
		browser.err = err
		return
	}
	browser.dir = dir
	// The flags keep Chromium from calling out: this machine's network is
	// closed, and a test must not depend on anything but 127.0.0.1.
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.UserDataDir(dir),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.WindowSize(1400, 1000),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	browser.ctx, browser.cancel, browser.cancelAlloc = ctx, cancel, cancelAlloc
	browser.err = chromedp.Do(ctx) // starts the browser; no timeout here (it would stop it)
	if browser.err != nil {
		browser.err = fmt.Errorf("starting %s: %w", path, browser.err)
	}
}

func stopBrowser() {
	if browser.cancel == nil {
		return
	}
	browser.cancel()
	browser.cancelAlloc() // waits for the process to end
	os.RemoveAll(browser.dir)
}

// newTab opens a tab of the shared browser, closed when the test ends. The
// test is skipped when no Chromium is installed, unless
// WATERTIGHT_REQUIRE_CHROMIUM=1 (CI), which makes it fail.
func newTab(t *testing.T) context.Context {
	t.Helper()
	path := chromiumPath()
	if path == "" {
		if os.Getenv("WATERTIGHT_REQUIRE_CHROMIUM") == "1" {
			t.Fatal("no Chromium on PATH (chromium, chromium-browser, google-chrome) and WATERTIGHT_CHROMIUM is unset, but WATERTIGHT_REQUIRE_CHROMIUM=1: install Debian's chromium (apt-get install chromium)")
		}
		t.Skip("skipped: no Chromium on PATH; install Debian's chromium (apt-get install chromium) or set WATERTIGHT_CHROMIUM to run the dashboard's browser tests")
	}
	browser.once.Do(func() { startBrowser(path) })
	if browser.err != nil {
		t.Fatal(browser.err)
	}
	ctx, cancel := chromedp.NewContext(browser.ctx)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil { // opens the tab
		t.Fatal(err)
	}
	return ctx
}
