package watertightconfig

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// A Section decodes a top-level section of a program's own (the gateway's
// listeners, routes and upstreams) with the errors and the value syntax of
// the library's sections: d reports each problem as FILE:LINE: path: rule,
// in one list with the library sections' problems. It is called once per
// file, after the library's sections were read (so d.File can check names
// against them), with the section's node, or nil when the file does not
// have the section.
type Section func(d *Decoder, n *yaml.Node)

// Entry is one key of a mapping and its value.
type Entry struct {
	// Key is the key as written.
	Key string
	// Line is the key's line.
	Line int
	// Value is the key's value.
	Value *yaml.Node
}

// Decoder reads the values of a Section, collecting every problem. Each
// method that reads a value reports a problem under path (the dotted YAML
// keys of the field, "routes.catalog.timeout") and returns ok false when
// the value is wrong; the Section goes on, so that a user sees every
// mistake at once.
type Decoder struct {
	d     *decoder
	file  *File
	after *[]func()
}

// After runs check once every Section has been read, for the rules that
// join sections (a route naming an upstream); checks run in the order
// they were registered. Sections themselves run in the order of their
// names.
func (d *Decoder) After(check func()) { *d.after = append(*d.after, check) }

// File returns the library's sections as read from the same file, for
// checking names: File().Breakers["per-host"].
func (d *Decoder) File() *File { return d.file }

// Fail reports a problem at n's line (0 if n is nil).
func (d *Decoder) Fail(n *yaml.Node, path, format string, args ...any) {
	d.d.fail(lineOf(n), path, format, args...)
}

// FailLine reports a problem at a line.
func (d *Decoder) FailLine(line int, path, format string, args ...any) {
	d.d.fail(line, path, format, args...)
}

// Mapping returns the entries of the mapping n, in the file's order, those
// merged in with << first; nil (and nothing reported) for a null or absent
// node; ok false, reported, when n is not a mapping.
func (d *Decoder) Mapping(n *yaml.Node, path string) (entries []Entry, ok bool) {
	ps, ok := d.d.pairs(n, path)
	out := make([]Entry, len(ps))
	for i, p := range ps {
		out[i] = Entry{Key: p.key, Line: p.line, Value: p.val}
	}
	return out, ok
}

// Unknown reports the key e as not one of known, suggesting the closest
// when it looks like a typo.
func (d *Decoder) Unknown(e Entry, path string, known []string) {
	what := "field"
	if path == "" {
		what = "section"
	}
	if s := suggest(e.Key, known); s != "" {
		d.d.fail(e.Line, join(path, e.Key), "unknown %s (did you mean %s?)", what, s)
		return
	}
	d.d.fail(e.Line, join(path, e.Key), "unknown %s (%ss: %s)", what, what, strings.Join(known, ", "))
}

// Fields calls read for each entry of the mapping n whose key is in
// fields, and reports the others as unknown. read gets the entry and its
// path.
func (d *Decoder) Fields(n *yaml.Node, path string, fields []string, read func(e Entry, path string)) bool {
	es, ok := d.Mapping(n, path)
	for _, e := range es {
		if !slices.Contains(fields, e.Key) {
			d.Unknown(e, path, fields)
			continue
		}
		read(e, join(path, e.Key))
	}
	return ok
}

func (d *Decoder) value(n *yaml.Node, path, msg string) bool {
	if msg != "" {
		d.Fail(n, path, "%s", msg)
		return false
	}
	return true
}

// String reads a string.
func (d *Decoder) String(n *yaml.Node, path string) (string, bool) {
	v, msg := stringValue(n)
	return v, d.value(n, path, msg)
}

// Name reads an instance name: a string without dots, control characters
// or surrounding spaces, at most 200 bytes.
func (d *Decoder) Name(n *yaml.Node, path string) (string, bool) {
	v, ok := d.String(n, path)
	if ok && !validName(v) {
		d.Fail(n, path, "must be a name without dots, control characters or surrounding spaces, got %q", v)
		return "", false
	}
	return v, ok
}

// Strings reads a list of strings; a single string is a list of one.
func (d *Decoder) Strings(n *yaml.Node, path string) ([]string, bool) {
	nd := deref(n)
	if nd != nil && nd.Kind == yaml.ScalarNode && !isNull(nd) {
		s, ok := d.String(n, path)
		return []string{s}, ok
	}
	if nd == nil || nd.Kind != yaml.SequenceNode {
		d.Fail(n, path, "must be a list of strings, got %s", describe(n))
		return nil, false
	}
	out, ok := make([]string, 0, len(nd.Content)), true
	for i, c := range nd.Content {
		s, good := d.String(c, fmt.Sprintf("%s[%d]", path, i))
		ok = ok && good
		out = append(out, s)
	}
	return out, ok
}

// Int reads an integer within [lo, hi].
func (d *Decoder) Int(n *yaml.Node, path string, lo, hi int64) (int64, bool) {
	v, msg := intValue(n)
	if msg == "" && (v < lo || v > hi) {
		msg = fmt.Sprintf("%s, got %d", intRule(lo, hi, v), v)
	}
	return v, d.value(n, path, msg)
}

// Float reads a finite number.
func (d *Decoder) Float(n *yaml.Node, path string) (float64, bool) {
	v, msg := floatValue(n)
	return v, d.value(n, path, msg)
}

// Bool reads true or false.
func (d *Decoder) Bool(n *yaml.Node, path string) (bool, bool) {
	v, msg := boolValue(n)
	return v, d.value(n, path, msg)
}

// Duration reads a Go duration ("250ms") of at least lo, or one of the
// keywords (off, unlimited) mapped to its value.
func (d *Decoder) Duration(n *yaml.Node, path string, lo time.Duration, keywords map[string]time.Duration) (time.Duration, bool) {
	v, msg := durationValue(n, keywords)
	if msg == "" && v < lo {
		if _, kw := keywords[deref(n).Value]; !kw {
			msg = fmt.Sprintf("must be at least %v, got %v", lo, v)
		}
	}
	return v, d.value(n, path, msg)
}

// Rate reads a fraction (0.5) or a percentage ("50%") in [0, 1].
func (d *Decoder) Rate(n *yaml.Node, path string) (float64, bool) {
	v, _, msg := rateValue(n)
	if msg == "" && (v < 0 || v > 1) {
		msg = fmt.Sprintf("must be between 0 and 1 (0%% and 100%%), got %s", describe(n))
	}
	return v, d.value(n, path, msg)
}

// Ref reports name, read from n at path, when the library section (such as
// "breakers") does not define it, in the library's own words: no breaker
// named "x" (breakers: a, b); did you mean "a"? It returns whether the
// name is defined.
func (d *Decoder) Ref(n *yaml.Node, path, section, name string) bool {
	var have []string
	noun := strings.TrimSuffix(section, "s")
	switch section {
	case "breakers":
		have = sortedKeys(d.file.Breakers)
	case "bulkheads":
		have = sortedKeys(d.file.Bulkheads)
	case "retries":
		have, noun = sortedKeys(d.file.Retries), "retry policy"
	case "budgets":
		have = sortedKeys(d.file.Budgets)
	case "concurrency_budgets":
		have, noun = sortedKeys(d.file.ConcurrencyBudgets), "concurrency budget"
	case "timeouts":
		have = sortedKeys(d.file.Timeouts)
	case "hedges":
		have, noun = sortedKeys(d.file.Hedges), "hedging policy"
	case "limiters":
		have = sortedKeys(d.file.Limiters)
	default:
		panic("watertightconfig: Decoder.Ref: unknown section " + section)
	}
	return d.Missing(n, path, noun, section, name, have)
}

// Missing is Ref for names a program's own sections define: it reports
// name at path unless have (the names section defines) holds it, and
// returns whether it does.
func (d *Decoder) Missing(n *yaml.Node, path, noun, section, name string, have []string) bool {
	if slices.Contains(have, name) {
		return true
	}
	d.Fail(n, path, "%s", missingName(noun, section, name, have, true))
	return false
}

// ParseWith is Parse for a file that holds, beside the library's
// sections, sections of the caller's own: each key of sections is a
// top-level key the file may have, decoded by its Section. The errors of
// every section come in one Errors list, in the file's order.
func ParseWith(name string, data []byte, sections map[string]Section) (*File, error) {
	for k := range sections {
		if contains(librarySections(), k) {
			return nil, fmt.Errorf("watertightconfig: ParseWith: section %q is the library's own", k)
		}
	}
	d := &decoder{file: name, extra: sections}
	var root yaml.Node
	if err := parseYAML(data, &root); err != nil {
		line, msg := syntaxLine(err.Error(), data)
		d.fail(line, "", "invalid YAML: %s", msg)
		return nil, d.errs
	}
	f := d.readFile(&root)
	if !d.bomb {
		var after []func()
		for _, k := range sortedKeys(sections) {
			sections[k](&Decoder{d: d, file: f, after: &after}, d.extraNodes[k])
		}
		for _, check := range after {
			check()
		}
	}
	if len(d.errs) > 0 {
		sort.SliceStable(d.errs, func(i, j int) bool { return d.errs[i].Line < d.errs[j].Line })
		return nil, d.errs
	}
	return f, nil
}

// LoadWith is Load with sections of the caller's own; see ParseWith.
func LoadWith(path string, sections map[string]Section) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return ParseWith(path, data, sections)
}

func librarySections() []string { return append([]string{"defaults"}, sections...) }
