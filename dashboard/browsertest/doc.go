// Package browsertest holds the dashboard's tests in a real browser:
// headless Chromium (Debian's chromium package) driven through the Chrome
// DevTools Protocol by chromedp, against the dashboard served on 127.0.0.1.
// It is a module of its own so that the root module keeps no dependency.
//
// The tests skip, with a note, when no Chromium is installed, and fail
// instead under WATERTIGHT_REQUIRE_CHROMIUM=1 (as in CI). Set
// WATERTIGHT_CHROMIUM to a browser's path to use another than the one on
// PATH (chromium, chromium-browser, google-chrome).
//
// With WATERTIGHT_SCREENSHOTS=DIR, TestScreenshots writes the pictures of
// docs/dashboard.md into DIR (scripts/screenshots.sh).
package browsertest
