package responses

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"time"
)

// Background responses shared by gateways on one store. Each pending
// response is run by the one gateway holding its claim (a lease of the
// state store, Store.ClaimJob): the gateway that creates it claims it
// before storing it; renew keeps the claims of the responses this
// gateway holds; scanJobs claims and runs the pending responses whose
// claim ran out. A cancel sent to another gateway is a key in the store
// (Store.RequestCancel) that watch reads; a stream followed on another
// gateway reads the stored events (followStored).

// releaseJob gives up this gateway's claim on response id. A release
// that fails leaves the claim to run out.
func (s *Service) releaseJob(id string) {
	if err := s.store.ReleaseJob(context.Background(), id, s.cfg.Holder); err != nil {
		s.log.Warn("releasing a background response's claim failed", "response", id, "err", err)
	}
}

// takeOver claims each pending background response that no gateway
// holds and runs it here (recover). Called by Start, then by scanJobs
// alone, so two take-overs of one service never race.
func (s *Service) takeOver(ctx context.Context) error {
	recs, err := s.store.PendingJobs(ctx)
	if err != nil || len(recs) == 0 {
		return err
	}
	cancels, err := s.store.CancelRequests(ctx)
	if err != nil {
		return err
	}
	for _, rec := range recs {
		id := rec.Response.ID
		if s.runsHere(id) {
			continue
		}
		ok, err := s.store.ClaimJob(ctx, id, s.cfg.Holder, s.cfg.JobLease)
		if err != nil {
			return err
		}
		if !ok {
			continue // another gateway runs it
		}
		// Read it again under the claim: the gateway that held it may
		// have ended it since the list was read.
		cur, err := s.store.GetResponse(ctx, rec.Tenant, id)
		if err != nil || cur.Job == nil {
			s.releaseJob(id)
			if unavailable(err) {
				return err
			}
			continue
		}
		s.takenOver.Inc()
		s.recover(cur, slices.Contains(cancels, id))
	}
	return nil
}

// scanJobs looks for pending responses without a live claim every half
// Config.JobLease, until Close.
func (s *Service) scanJobs() {
	s.every(s.cfg.JobLease/2, func() {
		if err := s.takeOver(s.ctx); err != nil && s.ctx.Err() == nil {
			s.log.Warn("looking for background responses to take over failed", "err", err)
		}
	})
}

// renewClaims renews the claims of this gateway's background responses
// every third of Config.JobLease, until Close; watchCancels reads the
// cancels requested for them every Config.JobPoll. Each has a goroutine
// of its own, so a slow scan of cancels never delays a renewal.
func (s *Service) renewClaims()  { s.every(s.cfg.JobLease/3, s.renew) }
func (s *Service) watchCancels() { s.every(s.cfg.JobPoll, s.readCancels) }

// localJobs is a snapshot of the background responses this gateway runs.
func (s *Service) localJobs() []*job {
	s.mu.Lock()
	defer s.mu.Unlock()
	jobs := make([]*job, 0, len(s.mu.jobs))
	for _, j := range s.mu.jobs {
		jobs = append(jobs, j)
	}
	return jobs
}

// renewParallel bounds the renewals in flight at once: each is a write
// that a Redis under appendfsync always fsyncs, and concurrent ones share
// the fsync, so thousands of claims renew well within a lease.
const renewParallel = 32

// renew renews this gateway's claims. A claim that ran out (this gateway
// was too slow to renew it, so another may run the response now, or
// have ended it) stops the job here without ending the response.
func (s *Service) renew() {
	var wg sync.WaitGroup
	slots := make(chan struct{}, renewParallel)
	for _, j := range s.localJobs() {
		if j.lost.Load() {
			continue // stopping already
		}
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			s.renewOne(j)
		}()
	}
	wg.Wait()
}

func (s *Service) renewOne(j *job) {
	ok, err := s.store.RenewJob(s.ctx, j.id, s.cfg.Holder, s.cfg.JobLease)
	switch {
	case err != nil:
		if s.ctx.Err() == nil {
			s.log.Warn("renewing a background response's claim failed", "response", j.id, "err", err)
		}
	case !ok:
		// run logs and counts it as it stops.
		j.lost.Store(true)
		j.cancel()
	}
}

// readCancels stops the jobs here that a cancel was requested for
// through any gateway: one scan, however many jobs run.
func (s *Service) readCancels() {
	if len(s.localJobs()) == 0 {
		return
	}
	ids, err := s.store.CancelRequests(s.ctx)
	if err != nil {
		if s.ctx.Err() == nil {
			s.log.Warn("reading cancel requests failed", "err", err)
		}
		return
	}
	for _, id := range ids {
		if j := s.job(id); j != nil {
			j.stop()
		}
	}
}

// stopRemote asks whichever gateway runs response id to stop it, and
// waits until the response has ended, for at most 2×Config.JobLease (a
// dead gateway's claim runs out and the gateway taking it over ends it
// cancelled) or until ctx ends. Past that bound it returns nil: the
// cancel stays requested.
func (s *Service) stopRemote(ctx context.Context, tenant, id string) error {
	if err := s.store.RequestCancel(ctx, id); err != nil {
		return err
	}
	deadline := time.Now().Add(2 * s.cfg.JobLease)
	for time.Now().Before(deadline) {
		if pending, err := s.pending(ctx, tenant, id); err != nil || !pending {
			return err
		}
		if !sleep(ctx, s.cfg.JobPoll) {
			return ctx.Err()
		}
	}
	return nil
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
		if !sleep(ctx, s.cfg.JobPoll) {
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
