package scrape

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseGatewayCounters(t *testing.T) {
	text := `# HELP turnpike_stream_migrations_total Streams whose engine died.
# TYPE turnpike_stream_migrations_total counter
turnpike_stream_migrations_total{result="failed"} 1
turnpike_stream_migrations_total{result="not_resumable"} 2
turnpike_stream_migrations_total{result="resumed"} 7
# TYPE turnpike_upstream_retries_total counter
turnpike_upstream_retries_total 4
# TYPE turnpike_requests_total counter
turnpike_requests_total{code="200"} 99
`
	g, err := ParseGatewayCounters(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"failed": 1, "not_resumable": 2, "resumed": 7}
	if !reflect.DeepEqual(g.Migrations, want) || g.Retries != 4 {
		t.Errorf("migrations %v, retries %v; want %v and 4", g.Migrations, g.Retries, want)
	}
	if _, err := ParseGatewayCounters(strings.NewReader("not metrics {")); err == nil {
		t.Error("garbage parsed")
	}
}
