// Command benchtable reads the output of `go test -bench -benchmem` on its
// standard input and prints a markdown table per benchmark group: for each
// sub-benchmark the median ns/op over the -count runs, the median B/op and
// allocs/op, and its ns/op as a multiple of the group's watertight entry. A
// group whose benchmarks report an overhead-% metric gets the median of that
// instead.
//
//	go test -run '^$' -bench . -benchmem -count 5 | go run ./cmd/benchtable
//
// A benchmark named BenchmarkGroup/sub-N (N is GOMAXPROCS) belongs to group
// Group. Groups and rows keep the order in which they first appear. The
// reference of a group is its sub-benchmark named "watertight"; a group
// without one shows no ratios. A nested sub-benchmark, peer/variant, is
// compared with watertight/variant.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// reference is the sub-benchmark that the others are compared with.
const reference = "watertight"

// sample is the measurements of one sub-benchmark, one entry per run.
type sample struct {
	ns, bytes, allocs []float64
	overhead          []float64 // overhead-%, reported by the Overhead benchmarks
}

type group struct {
	name string
	subs []string // in order of appearance
	data map[string]*sample
}

// lineRE matches a result line: name, iterations, then "value unit" pairs.
var lineRE = regexp.MustCompile(`^Benchmark(\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

// parse reads benchmark output and returns its groups in order.
func parse(r io.Reader) ([]*group, error) {
	var groups []*group
	byName := map[string]*group{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		m := lineRE.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		gname, sub, ok := strings.Cut(m[1], "/")
		if !ok {
			sub = ""
		}
		g := byName[gname]
		if g == nil {
			g = &group{name: gname, data: map[string]*sample{}}
			byName[gname] = g
			groups = append(groups, g)
		}
		s := g.data[sub]
		if s == nil {
			s = &sample{}
			g.data[sub] = s
			g.subs = append(g.subs, sub)
		}
		f := strings.Fields(m[2])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "ns/op":
				s.ns = append(s.ns, v)
			case "B/op":
				s.bytes = append(s.bytes, v)
			case "allocs/op":
				s.allocs = append(s.allocs, v)
			case "overhead-%":
				s.overhead = append(s.overhead, v)
			}
		}
	}
	return groups, sc.Err()
}

// median returns the median of xs, and false when xs is empty.
func median(xs []float64) (float64, bool) {
	if len(xs) == 0 {
		return 0, false
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2], true
	}
	return (s[n/2-1] + s[n/2]) / 2, true
}

// formatNs prints a duration in ns with three significant digits or so.
func formatNs(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

func formatCount(xs []float64) string {
	v, ok := median(xs)
	if !ok {
		return "–"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// hasOverhead reports whether g's benchmarks report overhead-% (see
// bench's measureOverhead): their table shows that instead of ns/op, which
// for them is the time of one call through each side.
func (g *group) hasOverhead() bool {
	for _, s := range g.data {
		if len(s.overhead) > 0 {
			return true
		}
	}
	return false
}

// write prints one markdown table per group.
func write(w io.Writer, groups []*group) {
	for i, g := range groups {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "### %s\n\n", g.name)
		if g.hasOverhead() {
			fmt.Fprintln(w, "| name | overhead-% (median of runs) | runs |")
			fmt.Fprintln(w, "| --- | ---: | ---: |")
			for _, sub := range g.subs {
				s := g.data[sub]
				fmt.Fprintf(w, "| %s | %s | %d |\n", sub, formatCount(s.overhead), len(s.overhead))
			}
			continue
		}
		fmt.Fprintln(w, "| name | ns/op (median) | B/op | allocs/op | runs | × watertight |")
		fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: |")
		ref, hasRef := 0.0, false
		if s := g.data[reference]; s != nil {
			ref, hasRef = median(s.ns)
			hasRef = hasRef && ref > 0
		}
		for _, sub := range g.subs {
			s := g.data[sub]
			name := sub
			if name == "" {
				name = g.name
			}
			ns, ok := median(s.ns)
			nsText, ratio := "–", "–"
			r, rok := ref, hasRef
			if _, rest, nested := strings.Cut(sub, "/"); nested {
				// peer/variant is compared with watertight/variant.
				r, rok = 0, false
				if rs := g.data[reference+"/"+rest]; rs != nil {
					r, rok = median(rs.ns)
					rok = rok && r > 0
				}
			}
			if ok {
				nsText = formatNs(ns)
				if rok {
					ratio = strconv.FormatFloat(ns/r, 'f', 2, 64) + "×"
				}
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %d | %s |\n",
				name, nsText, formatCount(s.bytes), formatCount(s.allocs), len(s.ns), ratio)
		}
	}
}

func main() {
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: go test -bench . -benchmem -count 5 | benchtable")
		flag.PrintDefaults()
	}
	flag.Parse()
	groups, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
	if len(groups) == 0 {
		fmt.Fprintln(os.Stderr, "benchtable: no benchmark results on standard input")
		os.Exit(1)
	}
	write(os.Stdout, groups)
}
