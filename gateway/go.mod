module github.com/watertight-go/watertight/gateway

go 1.25.0

require (
	github.com/redis/go-redis/v9 v9.22.0
	github.com/watertight-go/watertight v0.0.0
	github.com/watertight-go/watertight/contrib/redisstore v0.0.0
	github.com/watertight-go/watertight/contrib/watertightconfig v0.0.0
	github.com/watertight-go/watertight/contrib/watertightprom v0.0.0
	go.uber.org/goleak v1.3.0
	go.yaml.in/yaml/v3 v3.0.6
	google.golang.org/grpc v1.84.0
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_golang v1.24.1 // indirect
	github.com/prometheus/client_model v0.6.2 // indirect
	github.com/prometheus/common v0.70.1 // indirect
	github.com/prometheus/procfs v0.21.1 // indirect
	go.uber.org/atomic v1.11.0 // indirect
	golang.org/x/net v0.57.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	golang.org/x/text v0.40.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260706201446-f0a921348800 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace (
	github.com/watertight-go/watertight => ../
	github.com/watertight-go/watertight/contrib/redisstore => ../contrib/redisstore
	github.com/watertight-go/watertight/contrib/watertightconfig => ../contrib/watertightconfig
	github.com/watertight-go/watertight/contrib/watertightprom => ../contrib/watertightprom
)
