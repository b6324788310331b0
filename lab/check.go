package lab

import (
	"math"
	"strconv"
	"strings"
)

// AtLeast returns a check that value is at least lo (in unit: "%", "ms",
// "×", "/s", or "" for a count or a ratio); detail says what else was seen
// and may be empty. A NaN value fails.
func AtLeast(name string, value, lo float64, unit, detail string) Check {
	return bounded(name, value, &lo, nil, unit, detail)
}

// AtMost returns a check that value is at most hi (see AtLeast).
func AtMost(name string, value, hi float64, unit, detail string) Check {
	return bounded(name, value, nil, &hi, unit, detail)
}

// Within returns a check that value is in [lo, hi] (see AtLeast).
func Within(name string, value, lo, hi float64, unit, detail string) Check {
	return bounded(name, value, &lo, &hi, unit, detail)
}

func bounded(name string, value float64, lo, hi *float64, unit, detail string) Check {
	ok := !math.IsNaN(value) && (lo == nil || value >= *lo) && (hi == nil || value <= *hi)
	return Check{Name: name, OK: ok, Detail: detail, Value: value, Unit: unit, Min: lo, Max: hi, measured: true}
}

// Measured reports whether the check holds a measured value to a bound
// (it was made by AtLeast, AtMost or Within, or has Min or Max set).
func (c Check) Measured() bool { return c.measured || c.Min != nil || c.Max != nil }

// Bound is the check's bound as text: "≥ 0.95", "≤ 3%", "4–6%"; "" for a
// check without one.
func (c Check) Bound() string {
	switch {
	case c.Min != nil && c.Max != nil:
		return fmtNum(*c.Min) + "–" + fmtNum(*c.Max) + c.Unit
	case c.Min != nil:
		return "≥ " + fmtNum(*c.Min) + c.Unit
	case c.Max != nil:
		return "≤ " + fmtNum(*c.Max) + c.Unit
	}
	return ""
}

// Got is the measured value with its unit as text ("5.12%"); "" for a
// check without a measured value.
func (c Check) Got() string {
	if !c.Measured() {
		return ""
	}
	return fmtNum(c.Value) + c.Unit
}

// fmtNum writes a number with at most four significant decimals and no
// trailing zeros: 5.1234 → "5.123", 1000 → "1000", 0.95 → "0.95".
func fmtNum(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	decimals := 3
	if a := math.Abs(v); a >= 100 {
		decimals = 1
	} else if a >= 10 {
		decimals = 2
	}
	s := strconv.FormatFloat(v, 'f', decimals, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	if s == "-0" {
		s = "0"
	}
	return s
}

// checkJSON is a check in `watertight lab --json`.
type checkJSON struct {
	Name   string   `json:"name"`
	Pass   bool     `json:"pass"`
	Value  *float64 `json:"value,omitempty"`
	Unit   string   `json:"unit,omitempty"`
	Min    *float64 `json:"min,omitempty"`
	Max    *float64 `json:"max,omitempty"`
	Bound  string   `json:"bound,omitempty"`
	Detail string   `json:"detail,omitempty"`
}

func (c Check) json() checkJSON {
	j := checkJSON{Name: c.Name, Pass: c.OK, Unit: c.Unit, Min: c.Min, Max: c.Max, Bound: c.Bound(), Detail: c.Detail}
	if c.Measured() && !math.IsNaN(c.Value) && !math.IsInf(c.Value, 0) {
		v := c.Value
		j.Value = &v
	}
	return j
}

// Tally returns how many checks of results passed, and how many there are.
func Tally(results []*Result) (passed, total int) {
	for _, r := range results {
		for _, c := range r.Checks {
			total++
			if c.OK {
				passed++
			}
		}
	}
	return passed, total
}
