package lab

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
			fmt.Fprintf(bw, "%s  %s", passFail(c.OK), c.Name)
			if c.Detail != "" {
				fmt.Fprintf(bw, ": %s", c.Detail)
			}
			fmt.Fprintln(bw)
		}
	}
	fmt.Fprintln(bw)
	return bw.Flush()
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

// JSONDocument returns the document `watertight lab --json` prints: the
// result's JSON for one result, and {"scenarios":[...]} holding each
// result's JSON, in order, for several (or none).
func JSONDocument(results []*Result) any {
	if len(results) == 1 {
		return results[0].JSON
	}
	docs := make([]any, 0, len(results))
	for _, r := range results {
		docs = append(docs, r.JSON)
	}
	return struct {
		Scenarios []any `json:"scenarios"`
	}{docs}
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
// markdown, its checks and its charts), and one PNG file per chart, named
// after Chart.File. note, if not empty, is a paragraph under the page's
// heading (the CLI puts the command line there). Files already in dir are
// left alone, except those it writes.
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
	var md strings.Builder
	md.WriteString("# watertight lab report\n\n")
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
				fmt.Fprintf(&md, "- **%s** %s", passFail(c.OK), mdEscape(c.Name))
				if c.Detail != "" {
					fmt.Fprintf(&md, ": %s", mdEscape(c.Detail))
				}
				md.WriteString("\n")
			}
			md.WriteString("\n")
		}
		for _, c := range r.Charts {
			name := c.File + ".png"
			if err := writeChartFile(filepath.Join(dir, name), c); err != nil {
				return err
			}
			alt := c.Title
			if alt == "" {
				alt = c.File
			}
			fmt.Fprintf(&md, "![%s](%s)\n\n", mdEscape(alt), name)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, ReportIndex), []byte(md.String()), 0o644); err != nil {
		return fmt.Errorf("lab: report: %w", err)
	}
	return nil
}

func writeChartFile(path string, c Chart) (err error) {
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
	if err := WriteChartPNG(bw, c); err != nil {
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
