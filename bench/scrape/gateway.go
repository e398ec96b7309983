package scrape

import (
	"context"
	"io"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// The gateway's counters of the streams it moved and the sends it retried.
const (
	gatewayMigrations = "turnpike_stream_migrations"
	gatewayRetries    = "turnpike_upstream_retries"
)

// GatewayCounters are the gateway's retry and migration counters.
type GatewayCounters struct {
	// Migrations are turnpike_stream_migrations_total by result label.
	Migrations map[string]float64
	// Retries is turnpike_upstream_retries_total.
	Retries float64
}

// ScrapeGateway reads the gateway's /metrics at url for its counters.
func ScrapeGateway(ctx context.Context, url string) (GatewayCounters, error) {
	fams, err := Families(ctx, &http.Client{Timeout: 10 * time.Second}, url)
	if err != nil {
		return GatewayCounters{}, err
	}
	return gatewayCountersOf(fams), nil
}

// ParseGatewayCounters reads the migration counter by its result label
// and the retry counter from a Prometheus text exposition.
func ParseGatewayCounters(r io.Reader) (GatewayCounters, error) {
	fams, err := parseFamilies(r)
	if err != nil {
		return GatewayCounters{Migrations: map[string]float64{}}, err
	}
	return gatewayCountersOf(fams), nil
}

func gatewayCountersOf(fams map[string]*dto.MetricFamily) GatewayCounters {
	g := GatewayCounters{Migrations: map[string]float64{}}
	for _, name := range []string{gatewayMigrations, gatewayMigrations + "_total"} {
		byLabel(fams, name, "result", g.Migrations)
	}
	for _, name := range []string{gatewayRetries, gatewayRetries + "_total"} {
		for _, m := range fams[name].GetMetric() {
			g.Retries += m.GetCounter().GetValue()
		}
	}
	return g
}
