// Package bench benchmarks watertight side by side with failsafe-go,
// sony/gobreaker, afex/hystrix-go, x/sync's semaphore and plain channels.
// It is a module of its own so that the library keeps no dependencies.
//
// Run every benchmark and print a table of medians from the repository root:
//
//	bash bench/run.sh [count]
//
// The benchmarks run their bodies in b.RunParallel, at -cpu 2 in run.sh: the
// numbers are for two goroutines sharing each primitive on two cores.
package bench
