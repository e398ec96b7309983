//go:build unix

package main

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
)

// TestActiveActiveKillUnderLoad: 20 writers chain Responses turns
// through gateway A, a process of its own; once A has acknowledged 60,
// it starts two background responses, and while the writers go on and
// the background responses run, A is killed with SIGKILL. Every response
// A acknowledged (answered completed, or incomplete at its token budget)
// is then read through gateway B as it was answered; each writer goes on
// with its chain through B from its last acknowledged turn, whose
// context B rebuilds whole; and B takes over A's background responses
// and runs them to their end.
func TestActiveActiveKillUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server, an engine fleet, a gateway and a child process")
	}
	srv, pool := startShared(t, jobScale)
	a, kill := startChildGateway(t, srv.URL(), pool)
	b, _ := startGateway(t, srv.URL(), pool, quickJobs)
	ctx := t.Context()

	const (
		writers = 20
		// killAfter acknowledged responses, A starts the background
		// responses and is killed while they run: mid-load, by count,
		// not by the clock.
		killAfter = 60
		// afterKill more turns each writer chains through B.
		afterKill = 2
	)
	acked := func(r *responses.Response) bool {
		return r.Status == responses.ResponseStatusCompleted ||
			(r.Status == responses.ResponseStatusIncomplete && r.IncompleteDetails.Reason == "max_output_tokens")
	}
	type writer struct {
		acked []*responses.Response // through A, in order
		onB   []*responses.Response
		err   error
	}
	var (
		ws        [writers]writer
		total     atomic.Int64
		reachOnce sync.Once
		reached   = make(chan struct{})
		killed    = make(chan struct{})
		wg        sync.WaitGroup
	)
	reach := func() { close(reached) }
	turn := func(gw openai.Client, w, i int, prev *responses.Response) (*responses.Response, error) {
		p := responses.ResponseNewParams{Model: defaultSimServedModel, MaxOutputTokens: openai.Int(4),
			Input: input(fmt.Sprintf("writer %d, turn %d", w, i))}
		if prev != nil {
			p.PreviousResponseID = openai.String(prev.ID)
		}
		return gw.Responses.New(ctx, p)
	}
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			me := &ws[w]
			var last *responses.Response
			for i := 0; ; i++ {
				r, err := turn(a, w, i, last)
				if err != nil {
					break // A is gone (or going): nothing acknowledged
				}
				if !acked(r) {
					me.err = fmt.Errorf("turn %d through A: %s", i, r.Status)
					return
				}
				me.acked = append(me.acked, r)
				last = r
				if total.Add(1) == killAfter {
					reachOnce.Do(reach)
				}
			}
			// A failed: killed, or (the count check below fails then)
			// before its time.
			reachOnce.Do(reach)
			<-killed
			for i := range afterKill {
				r, err := turn(b, w, len(me.acked)+i, last)
				if err != nil {
					me.err = fmt.Errorf("turn through B after the kill: %w", err)
					return
				}
				if last != nil && r.Usage.InputTokens < last.Usage.InputTokens+last.Usage.OutputTokens {
					me.err = fmt.Errorf("turn through B after the kill: %d input tokens, fewer than its previous turn's %d in and %d out",
						r.Usage.InputTokens, last.Usage.InputTokens, last.Usage.OutputTokens)
					return
				}
				me.onB = append(me.onB, r)
				last = r
			}
		}()
	}
	<-reached
	// Should the test stop early, the writers stop too: the child's
	// cleanup kills A, and B is theirs from then on.
	var freeOnce sync.Once
	free := func() { freeOnce.Do(func() { close(killed) }) }
	defer free()
	var jobs []*responses.Response
	for range 2 {
		jobs = append(jobs, longJob(t, a, 300))
	}
	for _, j := range jobs {
		waitRunning(t, b, j.ID)
	}
	kill()
	free()
	for _, j := range jobs {
		if got, err := b.Responses.Get(ctx, j.ID, responses.ResponseGetParams{}); err != nil || got.Status != responses.ResponseStatusInProgress {
			t.Errorf("background response %s at the kill: %v %v, want in_progress (a longer answer is needed)", j.ID, got.Status, err)
		}
	}
	wg.Wait()

	n := 0
	for w := range ws {
		me := &ws[w]
		if me.err != nil {
			t.Errorf("writer %d: %v", w, me.err)
		}
		for _, r := range me.acked {
			n++
			got, err := b.Responses.Get(ctx, r.ID, responses.ResponseGetParams{})
			if err != nil {
				t.Errorf("writer %d: acknowledged response %s lost: %v", w, r.ID, err)
				continue
			}
			if got.Status != r.Status || got.OutputText() != r.OutputText() || got.PreviousResponseID != r.PreviousResponseID {
				t.Errorf("writer %d: response %s reads %s %q (previous %q) through B, was answered %s %q (previous %q)",
					w, r.ID, got.Status, got.OutputText(), got.PreviousResponseID, r.Status, r.OutputText(), r.PreviousResponseID)
			}
		}
		if len(me.onB) != afterKill && me.err == nil {
			t.Errorf("writer %d: %d turns through B after the kill, want %d", w, len(me.onB), afterKill)
		}
	}
	if n < killAfter {
		t.Fatalf("%d responses acknowledged in all, want at least %d before the kill", n, killAfter)
	}
	t.Logf("%d responses acknowledged by A before its kill, all read back through B", n)

	for _, j := range jobs {
		got := waitEnd(t, b, j.ID, 2*time.Minute)
		if got.Status != responses.ResponseStatusCompleted && got.Status != responses.ResponseStatusIncomplete {
			t.Errorf("background response %s after the kill: %s %+v, want run to its end by B", j.ID, got.Status, got.Error)
		} else if got.OutputText() == "" {
			t.Errorf("background response %s ended without output", j.ID)
		}
	}
}
