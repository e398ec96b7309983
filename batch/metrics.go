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
	// resumed and leasesLost count batches this gateway took up
	// unfinished (at start, or from a gateway that stopped renewing) and
	// batches it stopped because their lease ran out.
	resumed    prometheus.Counter
	leasesLost prometheus.Counter
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
		resumed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "turnpike_batches_resumed_total",
			Help: "Unfinished batches this gateway took up: at its start, or after the gateway running them stopped renewing their lease.",
		}),
		leasesLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "turnpike_batch_leases_lost_total",
			Help: "Batches this gateway stopped because their lease ran out (left to the gateway that takes them over).",
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
		for _, c := range []prometheus.Collector{m.requests, m.retries, m.batches, m.intake, m.inFlight, m.active, m.resumed, m.leasesLost} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("batch: %w", err)
			}
		}
	}
	return m, nil
}
