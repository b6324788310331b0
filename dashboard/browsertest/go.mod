module github.com/watertight-go/watertight/dashboard/browsertest

go 1.25.0

require (
	github.com/chromedp/cdproto v0.160.1
	github.com/chromedp/chromedp v0.23.1
	github.com/watertight-go/watertight v0.0.0
	go.uber.org/goleak v1.3.0
)

require github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect

replace github.com/watertight-go/watertight => ../..
