module github.com/watertight-go/watertight/cmd/watertight

go 1.25.0

require (
	github.com/prometheus/client_golang v1.24.1
	github.com/watertight-go/watertight v0.0.0
	github.com/watertight-go/watertight/contrib/watertightconfig v0.0.0
	github.com/watertight-go/watertight/contrib/watertightotel v0.0.0
	github.com/watertight-go/watertight/contrib/watertightprom v0.0.0
	github.com/watertight-go/watertight/gateway v0.0.0
	github.com/watertight-go/watertight/lab v0.0.0
	go.opentelemetry.io/otel/exporters/prometheus v0.68.0
	go.opentelemetry.io/otel/sdk/metric v1.46.0
	go.uber.org/goleak v1.3.0
)

require (
	codeberg.org/go-fonts/liberation v0.5.0 // indirect
	codeberg.org/go-latex/latex v0.2.0 // indirect
	codeberg.org/go-pdf/fpdf v0.11.1 // indirect
	git.sr.ht/~sbinet/gg v0.7.0 // indirect
	github.com/ajstarks/svgo v0.0.0-20211024235047-1546f124cd8b // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/golang/freetype v0.0.0-20170609003504-e2365dfdc4a0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_model v0.6.2 // indirect
	github.com/prometheus/common v0.70.1 // indirect
	github.com/prometheus/otlptranslator v1.0.0 // indirect
	github.com/prometheus/procfs v0.21.1 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel v1.46.0 // indirect
	go.opentelemetry.io/otel/metric v1.46.0 // indirect
	go.opentelemetry.io/otel/sdk v1.46.0 // indirect
	go.opentelemetry.io/otel/trace v1.46.0 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/image v0.30.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	golang.org/x/text v0.40.0 // indirect
	gonum.org/v1/plot v0.17.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace (
	github.com/watertight-go/watertight => ../../
	github.com/watertight-go/watertight/contrib/watertightconfig => ../../contrib/watertightconfig
	github.com/watertight-go/watertight/contrib/watertightotel => ../../contrib/watertightotel
	github.com/watertight-go/watertight/contrib/watertightprom => ../../contrib/watertightprom
	github.com/watertight-go/watertight/gateway => ../../gateway
	github.com/watertight-go/watertight/lab => ../../lab
)
