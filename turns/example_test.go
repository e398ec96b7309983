package turns_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/turnpike-gateway/turnpike/turns"
)

// idlePool stands in for turns.PoolCapacity{Pool: p}, which the gateway
// would pass for the *pools.Pool it is about to send to.
type idlePool struct{}

func (idlePool) Name() string { return "h200" }
func (idlePool) Measure(time.Time, *turns.FlowControl) turns.Measurement {
	return turns.Measurement{Endpoints: 2, Open: 2, Room: -1, QueueRoom: -1, Slots: 128}
}

// The gateway's request path: classify, acquire, send, release.
func ExampleController_Acquire() {
	c, err := turns.New(turns.Config{
		Tenants: []turns.Tenant{{Name: "acme", Weight: 2, MaxBand: turns.Standard}},
	}, turns.WithRegisterer(prometheus.NewRegistry()))
	if err != nil {
		panic(err)
	}
	c.Start(context.Background())
	defer c.Close(context.Background())

	turn := &turns.Turn{
		Tenant: "acme",
		// Raw hints; Acquire classifies them against acme's bands.
		Hints:                turns.Hints{Priority: "interactive"}, // the x-turnpike-priority header
		SessionKey:           "sess-1",
		InputTokens:          1200,
		ExpectedOutputTokens: 300,
	}
	ticket, err := c.Acquire(context.Background(), turn, idlePool{})
	var se *turns.ShedError
	if errors.As(err, &se) {
		// Answer se.Status with Retry-After: se.RetryAfterSeconds() and
		// x-turnpike-dropped-reason: se.Reason.
		return
	}
	if err != nil {
		return // the client went away
	}
	// ... pick an endpoint, send the request, stream the answer ...
	ticket.Release(1450) // once, with the tokens the engine reported
	fmt.Println(ticket.Band())
	// Output: standard
}
