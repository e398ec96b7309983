package batch

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	requests *prometheus.CounterVec
	retries  *prometheus.CounterVec
	batches  *prometheus.CounterVec
	intake   *prometheus.CounterVec
	inFlight prometheus.Gauge
	active   prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnpike_batch_requests_total",
			Help: "Requests of batches that ended, by result: completed (a 2xx answer) or failed.",
		}, []string{"result"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnpike_batch_retries_total",
			Help: "Requests of batches tried again, by reason: shed (flow control refused it; its Retry-After was waited) or engine (the fleet failed it).",
		}, []string{"reason"}),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnpike_batches_total",
			Help: "Batches that ended, by status: completed, failed, expired or cancelled.",
		}, []string{"status"}),
		intake: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnpike_intake_requests_total",
			Help: "Requests of the Redis stream intake that ended, by result code: completed, deadline_exceeded, cancelled, refused, engine_error, invalid_request.",
		}, []string{"code"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "turnpike_batch_requests_in_flight",
			Help: "Requests of batches being run now (admitted or waiting in flow control's queues).",
		}),
		active: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "turnpike_batches_running",
			Help: "Batches that this gateway is running.",
		}),
	}
	for _, r := range []string{"completed", "failed"} {
		m.requests.WithLabelValues(r)
	}
	for _, r := range []string{"shed", "engine"} {
		m.retries.WithLabelValues(r)
	}
	for _, st := range []string{StatusCompleted, StatusFailed, StatusExpired, StatusCancelled} {
		m.batches.WithLabelValues(st)
	}
	for _, c := range []string{CodeCompleted, CodeDeadline, CodeCancelled, CodeRefused, CodeEngineError, CodeInvalidRequest} {
		m.intake.WithLabelValues(c)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.requests, m.retries, m.batches, m.intake, m.inFlight, m.active} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("batch: %w", err)
			}
		}
	}
	return m, nil
}
