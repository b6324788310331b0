package watertightconfig

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// decoder walks a parsed YAML document and collects every error, each with
// its line.
type decoder struct {
	file string
	errs Errors
	seen map[Error]bool // errors reported, to report each once
	work int            // mapping pairs visited, against alias bombs
	bomb bool

	extra      map[string]Section    // ParseWith's sections of the caller's own
	extraNodes map[string]*yaml.Node // their nodes in the file
}

// maxWork bounds the mapping pairs one file may make the decoder visit,
// aliases and merge keys included: far above any real file, far below what
// a "billion laughs" document asks for.
const maxWork = 200_000

// maxMergeDepth bounds merge keys (<<) within merged mappings.
const maxMergeDepth = 4

func (d *decoder) fail(line int, path, format string, args ...any) {
	e := Error{File: d.file, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)}
	if d.seen[e] {
		return // the same mapping, merged in twice
	}
	if d.seen == nil {
		d.seen = map[Error]bool{}
	}
	d.seen[e] = true
	d.errs = append(d.errs, &e)
}

// deref follows aliases; it returns nil for an alias that goes nowhere.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode; i++ {
		if i > 64 {
			return nil
		}
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

// describe names a node's value for "got ..." in messages.
func describe(n *yaml.Node) string {
	n = deref(n)
	switch {
	case n == nil:
		return "nothing"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case isNull(n):
		return "null"
	case n.Tag == "!!str":
		return strconv.Quote(n.Value)
	}
	return n.Value
}

// pair is one key and value of a mapping.
type pair struct {
	key  string
	line int
	val  *yaml.Node
}

// pairs returns the entries of a mapping, those merged in with << first so
// that the mapping's own keys, which come after, override them. A null node
// is an empty mapping. ok is false when n is not a mapping (reported).
func (d *decoder) pairs(n *yaml.Node, path string) (out []pair, ok bool) {
	return d.pairsDepth(n, path, 0)
}

func (d *decoder) pairsDepth(n *yaml.Node, path string, depth int) ([]pair, bool) {
	line := lineOf(n)
	n = deref(n)
	if isNull(n) {
		return nil, true
	}
	if n.Kind != yaml.MappingNode {
		d.fail(line, path, "must be a mapping of keys to values, got %s", describe(n))
		return nil, false
	}
	var merged, own []pair
	first := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if d.work++; d.work > maxWork {
			if !d.bomb {
				d.bomb = true
				d.fail(k.Line, path, "the file expands to more than %d keys through aliases and merges", maxWork)
			}
			return nil, false
		}
		kd := deref(k)
		if kd != nil && kd.Kind == yaml.ScalarNode && (kd.Tag == "!!merge" || (kd.Value == "<<" && kd.Style == 0)) {
			if depth >= maxMergeDepth {
				d.fail(k.Line, path, "merge keys (<<) nested more than %d deep", maxMergeDepth)
				continue
			}
			// <<: *a, or <<: [*a, *b] where earlier mappings win.
			vd := deref(v)
			var srcs []*yaml.Node
			if vd != nil && vd.Kind == yaml.SequenceNode {
				for j := len(vd.Content) - 1; j >= 0; j-- {
					srcs = append(srcs, vd.Content[j])
				}
			} else {
				srcs = append(srcs, v)
			}
			for _, s := range srcs {
				if sd := deref(s); sd == nil || sd.Kind != yaml.MappingNode {
					d.fail(lineOf(s), path, "a merge key (<<) takes a mapping or a list of mappings, got %s", describe(s))
					continue
				}
				ps, _ := d.pairsDepth(s, path, depth+1)
				merged = append(merged, ps...)
			}
			continue
		}
		if kd == nil || kd.Kind != yaml.ScalarNode {
			d.fail(k.Line, path, "keys must be plain strings, got %s", describe(k))
			continue
		}
		if isNull(kd) || kd.Value == "" {
			d.fail(k.Line, path, "empty key")
			continue
		}
		if at, dup := first[kd.Value]; dup {
			d.fail(k.Line, join(path, kd.Value), "duplicate key (first at line %d)", at)
			continue
		}
		first[kd.Value] = k.Line
		own = append(own, pair{key: kd.Value, line: k.Line, val: v})
	}
	return append(merged, own...), true
}

func lineOf(n *yaml.Node) int {
	if n == nil {
		return 0
	}
	return n.Line
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// scalar returns n's scalar node, or a message.
func scalar(n *yaml.Node, want string) (*yaml.Node, string) {
	n = deref(n)
	if n == nil || n.Kind != yaml.ScalarNode || isNull(n) {
		return nil, fmt.Sprintf("must be %s, got %s", want, describe(n))
	}
	return n, ""
}

// intValue reads an integer.
func intValue(n *yaml.Node) (int64, string) {
	s, msg := scalar(n, "an integer")
	if msg != "" {
		return 0, msg
	}
	var v int64
	if s.Tag != "!!int" || s.Decode(&v) != nil {
		return 0, "must be an integer, got " + describe(s)
	}
	return v, ""
}

// floatValue reads a finite number.
func floatValue(n *yaml.Node) (float64, string) {
	s, msg := scalar(n, "a number")
	if msg != "" {
		return 0, msg
	}
	var v float64
	if (s.Tag != "!!int" && s.Tag != "!!float") || s.Decode(&v) != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, "must be a finite number, got " + describe(s)
	}
	return v, ""
}

// boolValue reads true or false.
func boolValue(n *yaml.Node) (bool, string) {
	s, msg := scalar(n, "true or false")
	if msg != "" {
		return false, msg
	}
	var v bool
	if s.Tag != "!!bool" || s.Decode(&v) != nil {
		return false, "must be true or false, got " + describe(s)
	}
	return v, ""
}

// stringValue reads a string (a plain scalar that YAML would read as a
// number is taken as written: budget: 10 names the budget "10").
func stringValue(n *yaml.Node) (string, string) {
	s, msg := scalar(n, "a string")
	if msg != "" {
		return "", msg
	}
	if s.Tag != "!!str" && s.Tag != "!!int" && s.Tag != "!!float" {
		return "", "must be a string, got " + describe(s)
	}
	return s.Value, ""
}

// durationValue reads a Go duration string ("250ms", "1m30s"); 0 may be
// written bare. kw maps keywords ("off", "unlimited") to values.
func durationValue(n *yaml.Node, kw map[string]time.Duration) (time.Duration, string) {
	s, msg := scalar(n, `a duration such as "250ms"`)
	if msg != "" {
		return 0, msg
	}
	if v, ok := kw[s.Value]; ok && s.Tag == "!!str" {
		return v, ""
	}
	if s.Tag == "!!int" && s.Value == "0" {
		return 0, ""
	}
	if s.Tag == "!!str" {
		if d, err := time.ParseDuration(s.Value); err == nil {
			return d, ""
		}
	}
	return 0, fmt.Sprintf(`must be a duration such as "250ms" or "1m30s"%s, got %s`, orKeywords(kw), describe(s))
}

// rateValue reads a rate written as a fraction (0.5) or a percentage
// ("50%"). It returns the rate as a fraction and, exactly as written, as a
// percentage (pct), so that a percentage round-trips without rounding.
func rateValue(n *yaml.Node) (frac, pct float64, msg string) {
	s, m := scalar(n, `a fraction such as 0.5 or a percentage such as "50%"`)
	if m != "" {
		return 0, 0, m
	}
	bad := `must be a fraction such as 0.5 or a percentage such as "50%", got ` + describe(s)
	if s.Tag == "!!str" {
		num, ok := strings.CutSuffix(strings.TrimSpace(s.Value), "%")
		if !ok {
			return 0, 0, bad
		}
		p, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
		if err != nil || math.IsNaN(p) || math.IsInf(p, 0) {
			return 0, 0, bad
		}
		return p / 100, p, ""
	}
	f, m := floatValue(s)
	if m != "" {
		return 0, 0, bad
	}
	if f > 1 {
		return f, f * 100, fmt.Sprintf(`must be a fraction of 1 (0.5) or a percentage ("50%%"), got %s: write "%s%%" for a percentage`, s.Value, s.Value)
	}
	// A fraction's percentage, rounded off float noise (0.29·100 =
	// 28.999999999999996), unless that would round it to 0.
	pct = f * 100
	if r := math.Round(pct*1e9) / 1e9; r != 0 {
		pct = r
	}
	return f, pct, ""
}

func orKeywords[V any](kw map[string]V) string {
	if len(kw) == 0 {
		return ""
	}
	ks := sortedKeys(kw)
	return " or " + strings.Join(ks, " or ")
}

// validName reports whether an instance name is usable in a path, a log
// and a metric label.
func validName(s string) bool {
	if s == "" || strings.TrimSpace(s) != s || len(s) > 200 {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) || r == '.' {
			return false
		}
	}
	return true
}

// snake turns a Go field name into its YAML key: MaxHalfOpenWait →
// max_half_open_wait.
func snake(s string) string {
	var b strings.Builder
	rs := []rune(s)
	for i, r := range rs {
		if unicode.IsUpper(r) {
			if i > 0 && (unicode.IsLower(rs[i-1]) || (i+1 < len(rs) && unicode.IsLower(rs[i+1]))) {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToLower(r))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// suggest returns the known key closest to key, if it is close enough to be
// a typo.
func suggest(key string, known []string) string {
	// At most 3 edits (retry → retries), 1 for short keys.
	best, bestD := "", 4
	if len(key) <= 4 {
		bestD = 2
	}
	for _, k := range known {
		if d := editDistance(key, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 1 << 20
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
