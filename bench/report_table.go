package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// table is a header and rows of cells, printed aligned for a terminal or as
// markdown.
type table struct {
	header []string
	rows   [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) writeText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	line := func(cells []string) {
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	line(t.header)
	for _, r := range t.rows {
		line(r)
	}
	return tw.Flush()
}

func (t *table) writeMarkdown(w io.Writer) error {
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
	row(t.header)
	b.WriteString("|")
	for i := range t.header {
		if i == 0 {
			b.WriteString("---|")
		} else {
			b.WriteString("---:|")
		}
	}
	b.WriteString("\n")
	for _, r := range t.rows {
		row(r)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func ms(v float64) string {
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
