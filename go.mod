module github.com/watertight-go/watertight

go 1.25.0

require (
	go.uber.org/goleak v1.3.0
	pgregory.net/rapid v1.3.0
)
