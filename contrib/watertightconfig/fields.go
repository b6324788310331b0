package watertightconfig

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// field is one YAML key of an instance of type T: how to read it into T.
type field[T any] struct {
	key string
	// set reads n into c; it returns the rule broken, or "".
	set func(n *yaml.Node, c *T) string
	// sub, if not nil, is a nested mapping (retries.x.backoff) with fields
	// of its own, read into c through the decoder.
	sub func(d *decoder, n *yaml.Node, path string, c *T, src *source, fromDefaults bool) bool
}

// intField reads an integer in [lo, hi]; kw maps keywords to values.
func intField[T any](key string, lo, hi int64, kw map[string]int, ptr func(*T) *int) field[T] {
	return field[T]{key: key, set: func(n *yaml.Node, c *T) string {
		if s := deref(n); s != nil && s.Kind == yaml.ScalarNode && s.Tag == "!!str" {
			if v, ok := kw[s.Value]; ok {
				*ptr(c) = v
				return ""
			}
		}
		v, msg := intValue(n)
		if msg != "" {
			return "must be an integer" + orKeywords(kw) + ", got " + describe(n)
		}
		if v < lo || v > hi {
			return intRule(lo, hi, v) + orKeywords(kw) + ", got " + strconv.FormatInt(v, 10)
		}
		*ptr(c) = int(v)
		return ""
	}}
}

// maxInt is the bound of integer fields that have no bound of their own.
const maxInt = math.MaxInt32

// intRule states the bound that v is on the wrong side of.
func intRule(lo, hi, v int64) string {
	switch {
	case v > hi:
		return fmt.Sprintf("must be <= %d", hi)
	case lo == 1:
		return "must be > 0"
	}
	return fmt.Sprintf("must be >= %d", lo)
}

// durField reads a duration >= lo; kw maps keywords ("off", "unlimited") to
// values.
func durField[T any](key string, lo time.Duration, kw map[string]time.Duration, ptr func(*T) *time.Duration) field[T] {
	return field[T]{key: key, set: func(n *yaml.Node, c *T) string {
		v, msg := durationValue(n, kw)
		if msg != "" {
			return msg
		}
		if _, isKw := kw[deref(n).Value]; !isKw && v < lo {
			rule := "must be > 0"
			if lo == 0 {
				rule = "must be >= 0"
			}
			return rule + orKeywords(kw) + ", got " + describe(n)
		}
		*ptr(c) = v
		return ""
	}}
}

// rateField reads a rate in a range of fractions: (lo, hi] or [lo, hi)...
// as the brackets say. percent stores the percentage (the circuit package
// wants 50 for 50%); otherwise the fraction is stored.
func rateField[T any](key string, lo, hi float64, loOpen, hiOpen, percent bool, ptr func(*T) *float64) field[T] {
	return field[T]{key: key, set: func(n *yaml.Node, c *T) string {
		frac, pct, msg := rateValue(n)
		if msg != "" {
			return msg
		}
		if (loOpen && !(frac > lo)) || (!loOpen && !(frac >= lo)) || (hiOpen && !(frac < hi)) || (!hiOpen && !(frac <= hi)) {
			return "must be in " + interval(lo, hi, loOpen, hiOpen) + " (a fraction, or a percentage such as \"50%\"), got " + describe(n)
		}
		if percent {
			*ptr(c) = pct
		} else {
			*ptr(c) = frac
		}
		return ""
	}}
}

// zeroMeans is f, where a zero read from the file is stored as v: for
// fields whose real zero the Go Config spells negative (a zero there means
// the default).
func zeroMeans[T any, V int | float64 | time.Duration](f field[T], ptr func(*T) *V, v V) field[T] {
	set := f.set
	f.set = func(n *yaml.Node, c *T) string {
		msg := set(n, c)
		if msg == "" && *ptr(c) == 0 {
			*ptr(c) = v
		}
		return msg
	}
	return f
}

// offRate is a rate field that also reads the keyword off, stored as -1:
// a rule turned off (the Go Config's negative).
func offRate[T any](f field[T], ptr func(*T) *float64) field[T] {
	set := f.set
	f.set = func(n *yaml.Node, c *T) string {
		if s := deref(n); s != nil && s.Kind == yaml.ScalarNode && s.Tag == "!!str" && s.Value == "off" {
			*ptr(c) = -1
			return ""
		}
		msg := set(n, c)
		if frac, _, bad := rateValue(n); msg != "" && bad == "" && frac <= 0 {
			msg += "; write off to turn the rule off"
		}
		return msg
	}
	return f
}

func interval(lo, hi float64, loOpen, hiOpen bool) string {
	l, r := "[", "]"
	if loOpen {
		l = "("
	}
	if hiOpen {
		r = ")"
	}
	return l + strconv.FormatFloat(lo, 'g', -1, 64) + ", " + strconv.FormatFloat(hi, 'g', -1, 64) + r
}

// floatField reads a finite number in [lo, hi] (lo excluded if loOpen);
// kw maps keywords to values.
func floatField[T any](key string, lo, hi float64, loOpen bool, kw map[string]float64, ptr func(*T) *float64) field[T] {
	return field[T]{key: key, set: func(n *yaml.Node, c *T) string {
		if s := deref(n); s != nil && s.Kind == yaml.ScalarNode && s.Tag == "!!str" {
			if v, ok := kw[s.Value]; ok {
				*ptr(c) = v
				return ""
			}
		}
		v, msg := floatValue(n)
		if msg != "" {
			return "must be a number" + orKeywords(kw) + ", got " + describe(n)
		}
		if (loOpen && !(v > lo)) || (!loOpen && !(v >= lo)) || v > hi {
			rule := "must be <= " + strconv.FormatFloat(hi, 'g', -1, 64)
			switch {
			case loOpen && !(v > lo):
				rule = "must be > " + strconv.FormatFloat(lo, 'g', -1, 64)
			case !loOpen && !(v >= lo):
				rule = "must be >= " + strconv.FormatFloat(lo, 'g', -1, 64)
			}
			return rule + orKeywords(kw) + ", got " + describe(n)
		}
		*ptr(c) = v
		return ""
	}}
}

func boolField[T any](key string, ptr func(*T) *bool) field[T] {
	return field[T]{key: key, set: func(n *yaml.Node, c *T) string {
		v, msg := boolValue(n)
		if msg != "" {
			return msg
		}
		*ptr(c) = v
		return ""
	}}
}

// enumField reads one of names; set receives its index.
func enumField[T any](key string, names []string, set func(*T, int)) field[T] {
	return field[T]{key: key, set: func(n *yaml.Node, c *T) string {
		s, msg := scalar(n, "one of "+strings.Join(names, ", "))
		if msg == "" {
			if i := slices.Index(names, s.Value); i >= 0 && s.Tag == "!!str" {
				set(c, i)
				return ""
			}
		}
		return "must be one of " + strings.Join(names, ", ") + ", got " + describe(n)
	}}
}

func stringField[T any](key string, ptr func(*T) *string) field[T] {
	return field[T]{key: key, set: func(n *yaml.Node, c *T) string {
		v, msg := stringValue(n)
		if msg != "" {
			return msg
		}
		if v == "" {
			return "must not be empty (leave the field out for none)"
		}
		*ptr(c) = v
		return ""
	}}
}

// source records where an instance and each of its fields were written.
type source struct {
	line int               // the instance's name
	set  map[string]origin // field key (nested: "backoff.base") → where set
}

// origin is where a field's value was written.
type origin struct {
	line     int
	defaults bool // in the defaults section, not in the instance
}

func (s source) clone() source {
	m := make(map[string]origin, len(s.set))
	for k, v := range s.set {
		m[k] = v
	}
	return source{line: s.line, set: m}
}

// lineOf returns where key was set, or the instance's line.
func (s source) lineOf(key string) int {
	if o, ok := s.set[key]; ok {
		return o.line
	}
	return s.line
}

// inInstance reports whether key was written in the instance itself.
func (s source) inInstance(key string) bool {
	o, ok := s.set[key]
	return ok && !o.defaults
}

// decodeFields reads a mapping's keys into c through fields, reporting
// unknown keys and broken rules. It reports whether every key was valid.
func decodeFields[T any](d *decoder, n *yaml.Node, path, prefix string, fields []field[T], c *T, src *source, fromDefaults bool) bool {
	ps, ok := d.pairs(n, path)
	for _, p := range ps {
		i := slices.IndexFunc(fields, func(f field[T]) bool { return f.key == p.key })
		fp := join(path, p.key)
		if i < 0 {
			keys := make([]string, len(fields))
			for j, f := range fields {
				keys[j] = f.key
			}
			if s := suggest(p.key, keys); s != "" {
				d.fail(p.line, fp, "unknown field (did you mean %s?)", s)
			} else {
				d.fail(p.line, fp, "unknown field (fields: %s)", strings.Join(keys, ", "))
			}
			ok = false
			continue
		}
		f := fields[i]
		if f.sub != nil {
			if !f.sub(d, p.val, fp, c, src, fromDefaults) {
				ok = false
			}
			continue
		}
		if msg := f.set(p.val, c); msg != "" {
			d.fail(p.line, fp, "%s", msg)
			ok = false
			continue
		}
		src.set[prefix+p.key] = origin{line: p.line, defaults: fromDefaults}
	}
	return ok
}
