module github.com/watertight-go/watertight/bench

go 1.25.0

require (
	github.com/afex/hystrix-go v0.0.0-20180502004556-fa1af6a1f4f5
	github.com/cenkalti/backoff/v5 v5.0.3
	github.com/failsafe-go/failsafe-go v0.9.8
	github.com/sony/gobreaker/v2 v2.4.0
	github.com/watertight-go/watertight v0.0.0
	golang.org/x/sync v0.22.0
)

require (
	github.com/bits-and-blooms/bitset v1.24.4 // indirect
	github.com/smartystreets/goconvey v1.8.1 // indirect
)

replace github.com/watertight-go/watertight => ../
