module github.com/watertight-go/watertight/contrib/watertightconfig

go 1.25.0

require (
	github.com/watertight-go/watertight v0.0.0
	go.uber.org/goleak v1.3.0
	go.yaml.in/yaml/v3 v3.0.6
)

replace github.com/watertight-go/watertight => ../..
