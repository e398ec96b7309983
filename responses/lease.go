package responses

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/turnpike-gateway/turnpike/jobs"
)

// Background responses shared by gateways on one store run as work of a
// jobs.Queue: each pending response runs on the one gateway holding its
// lease, the gateway that creates it or, once no live gateway holds it,
// the one that takes it over (adopt). A cancel sent to another gateway is
// a cancel request of the queue; a stream followed on another gateway
// reads the stored events (followStored).

// jobKeys are the leases and cancel requests of background responses in
// the store's namespace (doc.go has the layout).
var jobKeys = jobs.Keys{Lease: pfxLease, Cancel: pfxStop}

// newJobs is the queue of s's background responses.
func (s *Service) newJobs() *jobs.Queue[*job] {
	q, err := jobs.New(jobs.Options[*job]{
		Namespace: s.store.Namespace(), Keys: jobKeys, Holder: s.cfg.Holder,
		Lease: s.cfg.JobLease, Poll: s.cfg.JobPoll, Logger: s.log.With("jobs", "background responses"),
		Pending: s.pendingJobs, Adopt: s.adopt,
		LeaseLost: func(*jobs.Job[*job]) { s.claimsLost.Inc() },
	})
	if err != nil {
		panic(err) // the config is validated
	}
	return q
}

// pendingJobs lists the background responses that have not ended.
func (s *Service) pendingJobs(ctx context.Context) ([]string, error) {
	recs, err := s.store.PendingJobs(ctx)
	ids := make([]string, len(recs))
	for i, rec := range recs {
		ids[i] = rec.Response.ID
	}
	return ids, err
}

// adopt takes over background response id, whose lease this gateway has
// just taken: read again under the lease (the gateway that held it may
// have ended it since it was listed), it is recovered here.
func (s *Service) adopt(ctx context.Context, id string, cancelRequested bool) {
	cur, err := s.store.GetJob(ctx, id)
	if err != nil || cur.Job == nil {
		if err != nil && !errors.Is(err, ErrNotFound) {
			s.log.Warn("reading a background response to take over failed", "response", id, "err", err)
		}
		return
	}
	s.takenOver.Inc()
	s.recover(cur, cancelRequested)
}

// takeOver claims each pending background response that no gateway holds
// and runs it here (recover).
func (s *Service) takeOver(ctx context.Context) error { return s.jobs.TakeOver(ctx) }

// stopRemote asks whichever gateway runs response id to stop it, and
// waits until the response has ended (jobs.Queue.StopRemote).
func (s *Service) stopRemote(ctx context.Context, tenant, id string) error {
	return s.jobs.StopRemote(ctx, id, func(ctx context.Context) (bool, error) {
		pending, err := s.pending(ctx, tenant, id)
		return !pending, err
	})
}

// pending reports whether tenant's response id is stored and has not
// ended.
func (s *Service) pending(ctx context.Context, tenant, id string) (bool, error) {
	rec, err := s.store.GetResponse(ctx, tenant, id)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil && rec.Job != nil, err
}

// followStored sends the stored events of background response id after
// sequence number after, then those another gateway appends as it runs
// the response, read every Config.JobPoll, until the response ends, ctx
// ends or the sink fails. The terminal event is stored in the batch
// that ends the record, so the events read after seeing the record
// ended are the last.
func (s *Service) followStored(ctx context.Context, tenant, id string, after int, sink Sink) error {
	for {
		n, done, err := s.sendStored(ctx, id, &after, sink)
		if err != nil || done {
			return err
		}
		if n > 0 {
			continue
		}
		pending, err := s.pending(ctx, tenant, id)
		if err != nil {
			return err
		}
		if !pending {
			_, _, err := s.sendStored(ctx, id, &after, sink)
			return err
		}
		if !jobs.Sleep(ctx, jobs.Wall, s.cfg.JobPoll) {
			return nil
		}
	}
}

// sendStored sends the stored events after *after and moves it on; done
// when an event ended the response or the sink failed.
func (s *Service) sendStored(ctx context.Context, id string, after *int, sink Sink) (n int, done bool, err error) {
	evs, err := s.store.Events(ctx, id, *after)
	if err != nil {
		if ctx.Err() != nil {
			return 0, true, nil
		}
		return 0, true, err
	}
	for _, data := range evs {
		var h struct {
			Type string `json:"type"`
			Seq  int    `json:"sequence_number"`
		}
		json.Unmarshal(data, &h)
		if sink.Event(h.Type, data) != nil {
			return n, true, nil
		}
		n++
		*after = max(*after, h.Seq)
		if endsStream(h.Type) {
			return n, true, nil
		}
	}
	return n, false, nil
}

// endsStream reports whether an event of type typ is a response's last.
func endsStream(typ string) bool {
	switch typ {
	case "response.completed", "response.incomplete", "response.failed", "error":
		return true
	}
	return false
}
