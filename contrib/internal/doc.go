// Package internal holds what only the adapters in contrib/ share (the
// metrics exporters' event counts; the watched sources, which the root
// module's dashboard shares too, are package watch): it sits on the
// adapters' floor, above the patterns it imports, as DESIGN.md §2 asks of
// code that only exporters share. It is not API.
package internal
