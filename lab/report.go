package lab

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ReportIndex is the name of the report's page in the report folder.
const ReportIndex = "index.md"

// textWidth is where WriteText wraps the summary.
const textWidth = 100

// WriteText writes r for a terminal: a heading, the summary, each table
// with aligned columns, and the checks as PASS or FAIL lines with their
// details.
func WriteText(w io.Writer, r *Result) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "== %s ==\n", r.Scenario)
	if r.Summary != "" {
		for _, line := range wrap(r.Summary, textWidth) {
			fmt.Fprintln(bw, line)
		}
	}
	for _, t := range r.Tables {
		fmt.Fprintln(bw)
		writeTextTable(bw, t)
	}
	if len(r.Checks) > 0 {
		fmt.Fprintln(bw)
		for _, c := range r.Checks {
			fmt.Fprintf(bw, "%s  %s%s\n", passFail(c.OK), c.Name, checkNumbers(c))
		}
	}
	fmt.Fprintln(bw)
	return bw.Flush()
}

// checkNumbers is what follows a check's name: ": 5.12% (want 4–6%); the
// detail", or ": the detail", or nothing.
func checkNumbers(c Check) string {
	var parts []string
	if c.Measured() {
		parts = append(parts, fmt.Sprintf("%s (want %s)", c.Got(), c.Bound()))
	}
	if c.Detail != "" {
		parts = append(parts, c.Detail)
	}
	if len(parts) == 0 {
		return ""
	}
	return ": " + strings.Join(parts, "; ")
}

// TallyLine is the last line `watertight lab` prints: "N of M checks
// passed".
func TallyLine(results []*Result) string {
	passed, total := Tally(results)
	return fmt.Sprintf("%d of %d checks passed", passed, total)
}

func passFail(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

// writeTextTable writes t with its columns aligned: numbers to the right,
// text to the left.
func writeTextTable(w io.Writer, t Table) {
	if t.Title != "" {
		fmt.Fprintln(w, t.Title)
	}
	cols := len(t.Header)
	for _, row := range t.Rows {
		cols = max(cols, len(row))
	}
	width := make([]int, cols)
	numeric := make([]bool, cols)
	for i := range numeric {
		numeric[i] = len(t.Rows) > 0
	}
	measure := func(row []string, header bool) {
		for i, cell := range row {
			width[i] = max(width[i], utf8.RuneCountInString(cell))
			if !header && cell != "" && !isNumber(cell) {
				numeric[i] = false
			}
		}
	}
	measure(t.Header, true)
	for _, row := range t.Rows {
		measure(row, false)
	}
	line := func(row []string) {
		var b strings.Builder
		for i := range cols {
			cell := ""
			if i < len(row) {
				cell = row[i]
			}
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(cell))
			if i > 0 {
				b.WriteString("  ")
			}
			if numeric[i] {
				b.WriteString(pad + cell)
			} else {
				b.WriteString(cell + pad)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	if len(t.Header) > 0 {
		line(t.Header)
		rule := make([]string, cols)
		for i := range rule {
			rule[i] = strings.Repeat("-", width[i])
		}
		line(rule)
	}
	for _, row := range t.Rows {
		line(row)
	}
}

// isNumber reports whether a cell reads as a number, possibly signed and
// followed by a unit such as "%", "s" or "ms".
func isNumber(s string) bool {
	s = strings.TrimLeft(s, "+-±~≈")
	s = strings.TrimRightFunc(s, func(r rune) bool { return r == '%' || r == 'x' || r == '×' || (r >= 'a' && r <= 'z') || r == 'µ' })
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}

// wrap splits text into lines of at most width runes, at spaces.
func wrap(text string, width int) []string {
	var lines []string
	for _, para := range strings.Split(text, "\n") {
		words := strings.Fields(para)
		if len(words) == 0 {
			lines = append(lines, "")
			continue
		}
		cur := words[0]
		for _, word := range words[1:] {
			if utf8.RuneCountInString(cur)+1+utf8.RuneCountInString(word) > width {
				lines = append(lines, cur)
				cur = word
				continue
			}
			cur += " " + word
		}
		lines = append(lines, cur)
	}
	return lines
}

// RunInfo is what the JSON document says about the run besides the
// results: the command line, the seed and the flags.
type RunInfo struct {
	// Command is the command line; "" leaves it out.
	Command string
	// Seed is Options.Seed.
	Seed uint64
	// Flags are the flags' values as the run used them (the CLI passes a
	// struct with JSON tags); nil leaves them out.
	Flags any
}

// JSONDocument returns the document `watertight lab --json` prints. For one
// result it is the result's JSON object (Result.JSON, in the shape its
// issue fixes) with "checks" — every check: name, pass, the measured value,
// its unit and bounds, the bound as text, the detail — and the run's
// "seed", "flags", "command", "checks_passed" and "checks_total" added;
// for several (or none), {"command":…, "seed":…, "flags":…,
// "checks_passed":…, "checks_total":…, "scenarios":[…]}, each scenario's
// object with its "checks". A Result.JSON that is not an object becomes
// {"scenario": name, "result": its JSON}.
func JSONDocument(results []*Result, info RunInfo) (json.RawMessage, error) {
	passed, total := Tally(results)
	var run []jsonField
	if info.Command != "" {
		run = append(run, jsonField{"command", info.Command})
	}
	run = append(run, jsonField{"seed", info.Seed})
	if info.Flags != nil {
		run = append(run, jsonField{"flags", info.Flags})
	}
	run = append(run, jsonField{"checks_passed", passed}, jsonField{"checks_total", total})
	if len(results) == 1 {
		return scenarioJSON(results[0], run)
	}
	docs := make([]json.RawMessage, 0, len(results))
	for _, r := range results {
		d, err := scenarioJSON(r, nil)
		if err != nil {
			return nil, err
		}
		docs = append(docs, d)
	}
	return appendFields([]byte("{}"), append(run, jsonField{"scenarios", docs}))
}

type jsonField struct {
	key   string
	value any
}

// scenarioJSON is r's JSON object with its checks and the fields extra
// appended.
func scenarioJSON(r *Result, extra []jsonField) (json.RawMessage, error) {
	doc, err := json.Marshal(r.JSON)
	if err != nil {
		return nil, fmt.Errorf("lab: scenario %s: json: %w", r.Scenario, err)
	}
	var fields []jsonField
	if r.JSON == nil {
		doc = []byte("{}")
		fields = []jsonField{{"scenario", r.Scenario}}
	} else if doc = bytes.TrimSpace(doc); len(doc) == 0 || doc[0] != '{' {
		fields = []jsonField{{"scenario", r.Scenario}, {"result", json.RawMessage(doc)}}
		doc = []byte("{}")
	}
	checks := make([]checkJSON, 0, len(r.Checks))
	for _, c := range r.Checks {
		checks = append(checks, c.json())
	}
	fields = append(fields, jsonField{"checks", checks})
	return appendFields(doc, append(fields, extra...))
}

// appendFields adds fields at the end of the JSON object obj.
func appendFields(obj []byte, fields []jsonField) (json.RawMessage, error) {
	var b bytes.Buffer
	b.Write(obj[:len(obj)-1])
	empty := len(bytes.TrimSpace(obj[1:len(obj)-1])) == 0
	for _, f := range fields {
		v, err := json.Marshal(f.value)
		if err != nil {
			return nil, fmt.Errorf("lab: json: %s: %w", f.key, err)
		}
		if !empty {
			b.WriteByte(',')
		}
		empty = false
		k, _ := json.Marshal(f.key)
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// Passed reports whether every check of every result passed.
func Passed(results []*Result) bool {
	for _, r := range results {
		for _, c := range r.Checks {
			if !c.OK {
				return false
			}
		}
	}
	return true
}

// WriteReport writes the report of results into dir, creating it if
// needed: index.md, with a section per result (its summary, its tables in
// markdown, its checks and its charts), and each chart twice, as
// Chart.File + ".png" and + ".svg". note, if not empty, is a paragraph
// under the page's heading (the CLI puts the command line there).
//
// The folder holds one run: the files an earlier report wrote there (those
// its index.md lists) that this one does not write are removed — a report of
// one scenario after a report of all of them leaves no stale charts. Any
// other file in dir is left alone.
func WriteReport(dir string, results []*Result, note string) error {
	seen := map[string]string{}
	for _, r := range results {
		for _, c := range r.Charts {
			if err := checkChartFile(c.File); err != nil {
				return fmt.Errorf("lab: scenario %s: %w", r.Scenario, err)
			}
			if other, dup := seen[c.File]; dup {
				return fmt.Errorf("lab: chart file %q used by scenarios %s and %s", c.File, other, r.Scenario)
			}
			seen[c.File] = r.Scenario
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("lab: report: %w", err)
	}
	old := reportFiles(dir)
	written := map[string]bool{ReportIndex: true}
	var files []string
	var md strings.Builder
	md.WriteString(reportHeading + "\n\n")
	if note != "" {
		md.WriteString(note + "\n\n")
	}
	if len(results) > 1 {
		for _, r := range results {
			fmt.Fprintf(&md, "- [%s](#%s)%s\n", r.Scenario, anchor(r.Scenario), checkTally(r))
		}
		md.WriteString("\n")
	}
	for _, r := range results {
		fmt.Fprintf(&md, "## %s\n\n", r.Scenario)
		if r.Summary != "" {
			md.WriteString(r.Summary + "\n\n")
		}
		for _, t := range r.Tables {
			writeMarkdownTable(&md, t)
		}
		if len(r.Checks) > 0 {
			md.WriteString("**Checks**\n\n")
			for _, c := range r.Checks {
				fmt.Fprintf(&md, "- **%s** %s%s\n", passFail(c.OK), mdEscape(c.Name), mdEscape(checkNumbers(c)))
			}
			md.WriteString("\n")
		}
		for _, c := range r.Charts {
			png, svg := c.File+".png", c.File+".svg"
			if err := writeChartFile(filepath.Join(dir, png), c, "png"); err != nil {
				return err
			}
			if err := writeChartFile(filepath.Join(dir, svg), c, "svg"); err != nil {
				return err
			}
			written[png], written[svg] = true, true
			files = append(files, png, svg)
			alt := c.Title
			if alt == "" {
				alt = c.File
			}
			fmt.Fprintf(&md, "![%s](%s) ([SVG](%s))\n\n", mdEscape(alt), png, svg)
		}
	}
	// The list of the files written, for the next report to remove those
	// it does not write again.
	fmt.Fprintf(&md, "%s%s -->\n", filesMarker, strings.Join(files, " "))
	if err := os.WriteFile(filepath.Join(dir, ReportIndex), []byte(md.String()), 0o644); err != nil {
		return fmt.Errorf("lab: report: %w", err)
	}
	for _, name := range old {
		if written[name] {
			continue
		}
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("lab: report: removing a chart of the previous report: %w", err)
		}
	}
	return nil
}

const (
	reportHeading = "# watertight lab report"
	filesMarker   = "<!-- watertight lab files: "
)

// reportFiles returns the chart files the report in dir wrote, as its
// index.md lists them: the files marker, and the images it links (reports
// written before the marker existed). Only plain names of PNG or SVG files
// that are regular files count; nothing if dir holds no report.
func reportFiles(dir string) []string {
	md, err := os.ReadFile(filepath.Join(dir, ReportIndex))
	if err != nil || !bytes.HasPrefix(md, []byte(reportHeading+"\n")) {
		return nil
	}
	var names []string
	for line := range strings.SplitSeq(string(md), "\n") {
		if rest, ok := strings.CutPrefix(line, filesMarker); ok {
			names = append(names, strings.Fields(strings.TrimSuffix(rest, "-->"))...)
			continue
		}
		for _, m := range imageLink.FindAllStringSubmatch(line, -1) {
			names = append(names, m[1])
		}
	}
	var out []string
	for _, name := range names {
		ext := filepath.Ext(name)
		if checkChartFile(name) != nil || (ext != ".png" && ext != ".svg") || slices.Contains(out, name) {
			continue
		}
		if fi, err := os.Lstat(filepath.Join(dir, name)); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		out = append(out, name)
	}
	return out
}

// imageLink finds the targets of a report's image and SVG links.
var imageLink = regexp.MustCompile(`\]\(([^()\s/]+\.(?:png|svg))\)`)

func writeChartFile(path string, c Chart, format string) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("lab: report: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("lab: report: %w", cerr)
		}
	}()
	bw := bufio.NewWriter(f)
	if err := writeChart(bw, c, format); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("lab: report: %w", err)
	}
	return nil
}

// checkChartFile accepts a plain file name: letters, digits, '-', '_' and
// '.', not starting with a dot.
func checkChartFile(name string) error {
	ok := name != "" && name[0] != '.'
	for _, r := range name {
		ok = ok && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
	}
	if !ok {
		return errors.New("lab: chart file name " + strconv.Quote(name) + " must be letters, digits, '-', '_' or '.', not starting with '.'")
	}
	return nil
}

func checkTally(r *Result) string {
	if len(r.Checks) == 0 {
		return ""
	}
	pass := 0
	for _, c := range r.Checks {
		if c.OK {
			pass++
		}
	}
	return fmt.Sprintf(": %d of %d checks pass", pass, len(r.Checks))
}

// anchor is the heading anchor GitHub-flavoured markdown gives a heading.
func anchor(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

func writeMarkdownTable(b *strings.Builder, t Table) {
	if t.Title != "" {
		fmt.Fprintf(b, "**%s**\n\n", mdEscape(t.Title))
	}
	cols := len(t.Header)
	for _, row := range t.Rows {
		cols = max(cols, len(row))
	}
	if cols == 0 {
		return
	}
	row := func(cells []string) {
		b.WriteString("|")
		for i := range cols {
			cell := ""
			if i < len(cells) {
				cell = cells[i]
			}
			b.WriteString(" " + cellEscape(cell) + " |")
		}
		b.WriteString("\n")
	}
	header := t.Header
	if len(header) == 0 {
		header = make([]string, cols)
	}
	row(header)
	b.WriteString("|")
	for range cols {
		b.WriteString(" --- |")
	}
	b.WriteString("\n")
	for _, r := range t.Rows {
		row(r)
	}
	b.WriteString("\n")
}

// cellEscape keeps a cell on its line and its pipes inside it.
func cellEscape(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.Join(strings.Fields(s), " ")
}

// mdEscape escapes the characters that would start markdown emphasis or
// links inside running text.
func mdEscape(s string) string {
	r := strings.NewReplacer(`\`, `\\`, "*", `\*`, "_", `\_`, "[", `\[`, "]", `\]`, "`", "\\`")
	return r.Replace(s)
}
