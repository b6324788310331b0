// Package internal holds machinery shared by watertight's packages: bounded
// keyed maps, striped counters, windows. It is not API.
package internal
