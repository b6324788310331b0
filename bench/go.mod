module github.com/watertight-go/watertight/bench

go 1.26.0

require (
	github.com/afex/hystrix-go v0.0.0-20180502004556-fa1af6a1f4f5
	github.com/cenkalti/backoff/v5 v5.0.3
	github.com/failsafe-go/failsafe-go v0.9.8
	github.com/sony/gobreaker/v2 v2.4.0
	github.com/twmb/franz-go v1.22.3
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260918054303-01f206a7e32c
	github.com/watertight-go/watertight v0.0.0
	github.com/watertight-go/watertight/contrib/watertightgrpc v0.0.0
	github.com/watertight-go/watertight/contrib/watertightkafka v0.0.0
	go.uber.org/goleak v1.3.0
	golang.org/x/sync v0.22.0
	google.golang.org/grpc v1.84.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/bits-and-blooms/bitset v1.24.4 // indirect
	github.com/influxdata/tdigest v0.0.1 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/smartystreets/goconvey v1.8.1 // indirect
	github.com/twmb/franz-go/pkg/kmsg v1.15.1 // indirect
	golang.org/x/net v0.57.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	golang.org/x/text v0.40.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260706201446-f0a921348800 // indirect
)

replace github.com/watertight-go/watertight => ../

replace github.com/watertight-go/watertight/contrib/watertightgrpc => ../contrib/watertightgrpc

replace github.com/watertight-go/watertight/contrib/watertightkafka => ../contrib/watertightkafka
