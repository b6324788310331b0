// Package internal holds machinery shared by watertight's packages: bounded
// keyed maps, striped counters, windows, admission queues, key caches. It
// is not API.
package internal
