package report

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Table is a header and rows of cells, printed aligned for a terminal or as
// markdown; the proxy-overhead report prints its figures with it too.
type Table struct {
	Header []string
	Rows   [][]string
}

// Add appends a row.
func (t *Table) Add(cells ...string) { t.Rows = append(t.Rows, cells) }

// WriteText prints t aligned, right-justified, for a terminal.
func (t *Table) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	line := func(cells []string) {
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	line(t.Header)
	for _, r := range t.Rows {
		line(r)
	}
	return tw.Flush()
}

// WriteMarkdown prints t as a markdown table, its first column left-aligned.
func (t *Table) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	row := func(cells []string) {
		b.WriteString("|")
		for _, c := range cells {
			b.WriteString(" ")
			b.WriteString(strings.ReplaceAll(c, "|", `\|`))
			b.WriteString(" |")
		}
		b.WriteString("\n")
	}
	row(t.Header)
	b.WriteString("|")
	for i := range t.Header {
		if i == 0 {
			b.WriteString("---|")
		} else {
			b.WriteString("---:|")
		}
	}
	b.WriteString("\n")
	for _, r := range t.Rows {
		row(r)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Millis prints a latency in milliseconds: "-" for none, two decimals
// under 10, one under 1000, none above.
func Millis(v float64) string {
	switch {
	case v == 0:
		return "-"
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	case v < 1000:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func pct(v float64) string { return fmt.Sprintf("%.1f%%", v*100) }

func times(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", v)
}

func signedPct(v float64) string { return fmt.Sprintf("%+.1f%%", v) }
