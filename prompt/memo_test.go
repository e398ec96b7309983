package prompt

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"weak"
)

// sessionBodies are the bodies of one agent session's turns: each resends
// the whole history and adds a tool call and its result. session varies
// the task, so two sessions share only the system prompt.
func sessionBodies(session, turns int) [][]byte {
	type fn struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	type call struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function fn     `json:"function"`
	}
	type message struct {
		Role      string `json:"role"`
		Content   any    `json:"content"`
		ToolCalls []call `json:"tool_calls,omitempty"`
	}
	system := strings.Repeat("You are a coding agent.\n- Read before you edit; say \"done\" at the end.\n", 300)
	msgs := []message{{Role: "system", Content: system}, {Role: "user", Content: fmt.Sprintf("Task %d: fix the build — ünd run the tests.", session)}}
	var bodies [][]byte
	for turn := range turns {
		b, err := json.Marshal(map[string]any{
			"model": "m", "stream": turn%2 == 0, "max_tokens": 100 + turn, "messages": msgs,
			"tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "read_file"}}},
		})
		if err != nil {
			panic(err)
		}
		bodies = append(bodies, b)
		msgs = append(msgs,
			message{Role: "assistant", ToolCalls: []call{{ID: fmt.Sprint("c", turn), Type: "function", Function: fn{"read_file", fmt.Sprintf(`{"path":"f%d.go"}`, turn)}}}},
			message{Role: "tool", Content: []any{map[string]any{"type": "text", "text": fmt.Sprintf("package f%d\n\n\t\"quoted\" é\n", turn)}, map[string]any{"type": "text", "text": strings.Repeat("x", turn)}}})
	}
	return bodies
}

// longTaskSessions are sessionBodies of sessions whose tasks are long, so
// that what a session does not share with the others (the system prompt)
// is most of its text.
func longTaskSessions(sessions, turns int) [][][]byte {
	all := make([][][]byte, sessions)
	for s := range all {
		task := fmt.Appendf(nil, "Task %d: %s", s, strings.Repeat("a line of the task's context; ", 700))
		all[s] = sessionBodies(s, turns)
		for i, b := range all[s] {
			all[s][i] = bytes.Replace(b, fmt.Appendf(nil, "Task %d:", s), task, 1)
		}
	}
	return all
}

// memoParse parses body from a scratch copy through m, then overwrites the
// copy, as the gateway reuses body buffers: what the Request keeps of the
// body must not be the memo's business, and the memo must keep nothing
// of it.
func memoParse(t *testing.T, m *Memo, body []byte) *Request {
	t.Helper()
	scratch := bytes.Clone(body)
	got, err := m.ParseChat(scratch)
	if err != nil {
		t.Fatalf("memo: %v", err)
	}
	want, err := ParseChat(body)
	if err != nil {
		t.Fatal(err)
	}
	prior := got.Prior
	got.Prior = nil
	if !reflect.DeepEqual(got.Prompt.Messages, want.Prompt.Messages) || got.Model != want.Model || got.Stream != want.Stream ||
		*got.MaxTokens != *want.MaxTokens || !bytes.Equal(got.Prompt.Tools, want.Prompt.Tools) {
		t.Fatalf("memo read\n%+v\nwant\n%+v", got, want)
	}
	got.Prior = prior
	for i := range scratch {
		scratch[i] = 'X'
	}
	return got
}

func TestMemoResumesSessions(t *testing.T) {
	m := NewMemo(64 << 20)
	a, b := sessionBodies(1, 12), sessionBodies(2, 12)
	var prevA, prevB *Request
	for turn := range a {
		ra := memoParse(t, m, a[turn])
		rb := memoParse(t, m, b[turn])
		// The first body with an opening is only probed: nothing says
		// there will be a second. Both sessions share their system prompt,
		// so the second session's first body is remembered.
		if turn == 0 {
			if ra.Prior != nil || rb.Prior == nil {
				t.Fatalf("first bodies: Priors %v and %v, want none and one", ra.Prior, rb.Prior)
			}
			prevA, prevB = ra, rb
			continue
		}
		// Each session resumes from its own last turn, past all of its
		// messages; its second turn, at least past the shared system
		// prompt.
		for _, c := range []struct {
			name    string
			r, prev *Request
		}{{"a", ra, prevA}, {"b", rb, prevB}} {
			got, want := c.r.Prior.Messages, len(c.prev.Prompt.Messages)
			if turn == 1 && got < 1 || turn > 1 && got != want {
				t.Errorf("turn %d, session %s: resumed %d messages, want %d", turn, c.name, got, want)
			}
		}
		prevA, prevB = ra, rb
	}
	// The earlier turns' Requests still read right after the later ones
	// were parsed and every buffer was overwritten.
	last := sessionBodies(1, 12)[11]
	want, _ := ParseChat(last)
	if !reflect.DeepEqual(prevA.Prompt.Messages, want.Prompt.Messages) {
		t.Fatal("a remembered turn changed after later turns")
	}
	if st := m.Stats(); st.Hits == 0 || st.Entries != 2 {
		t.Errorf("stats %+v: want hits and one entry a session", st)
	}
}

// An edited history (a client that rewrote an earlier message) resumes
// only up to the edit, and reads the edit.
func TestMemoEditedHistory(t *testing.T) {
	m := NewMemo(64 << 20)
	bodies := sessionBodies(1, 8)
	memoParse(t, m, bodies[5])
	memoParse(t, m, bodies[6])
	edited := bytes.Replace(bodies[7], []byte(`f3.go`), []byte(`g3.go`), 1)
	r := memoParse(t, m, edited)
	// f3.go is in the arguments of message 2+2*3.
	if r.Prior.Messages != 8 {
		t.Errorf("resumed %d messages, want the 8 before the edit", r.Prior.Messages)
	}
	// Another task under the same system prompt shares that alone.
	other := bytes.Replace(bodies[7], []byte(`Task 1`), []byte(`Task 9`), 1)
	if r := memoParse(t, m, other); r.Prior.Messages != 1 {
		t.Errorf("another task resumed %d messages, want the system prompt", r.Prior.Messages)
	}
}

func TestMemoBounded(t *testing.T) {
	m := NewMemo(200 << 10)
	for s := range 20 {
		for _, b := range sessionBodies(s, 3) {
			memoParse(t, m, b)
		}
	}
	if st := m.Stats(); st.Bytes > 200<<10 || st.Entries == 0 {
		t.Errorf("stats %+v: want at most 200 KiB held", st)
	}
}

// Sessions that share a system prompt share its text in the memo, and the
// memo counts it once: each session's first remembered turn resumes from
// another's, and its accounted size must not carry the other's text too,
// or the budget would fill with text nobody holds twice and evict the
// sessions' own turns.
func TestMemoCountsSharedTextOnce(t *testing.T) {
	const sessions, turns = 16, 30
	m := NewMemo(64 << 20)
	all := longTaskSessions(sessions, turns)
	for turn := range turns {
		for s := range all {
			r := memoParse(t, m, all[s][turn])
			if turn > 1 && r.Prior.Messages != len(r.Prompt.Messages)-2 {
				t.Fatalf("session %d, turn %d: resumed %d of %d messages", s, turn, r.Prior.Messages, len(r.Prompt.Messages))
			}
		}
	}
	checkHeldOnce(t, m, all)
	// A long session's turns keep a bounded number of arenas each.
	for e := m.lru.Front(); e != 0; e = m.lru.Next(e) {
		if n := len((*m.lru.Value(e)).texts); n > maxTextSpans {
			t.Errorf("an entry spread over %d arenas", n)
		}
	}
}

// Sessions parsed at once, each remembering its chain as the dispatcher
// does, keep one entry each and their text counted once (run with -race:
// the arenas' holders are counted under the memo's lock).
func TestMemoConcurrentSessions(t *testing.T) {
	const sessions, turns = 8, 40
	m := NewMemo(64 << 20)
	all := longTaskSessions(sessions, turns)
	var wg sync.WaitGroup
	for s := range all {
		wg.Go(func() {
			for _, b := range all[s] {
				r, err := m.ParseChat(bytes.Clone(b))
				if err != nil {
					t.Error(err)
					return
				}
				r.Prior.Remember(&Chain{Ends: make([]int, len(r.Prompt.Messages)), Blocks: make([]uint64, 16)})
			}
		})
	}
	wg.Wait()
	checkHeldOnce(t, m, all)
}

// checkHeldOnce: after every turn of the sessions all, m holds one entry a
// session and counts no more than their last bodies hold, whole.
func checkHeldOnce(t *testing.T, m *Memo, all [][][]byte) {
	t.Helper()
	held := 0
	for _, bodies := range all {
		held += len(bodies[len(bodies)-1])
	}
	if st := m.Stats(); st.Entries != int64(len(all)) || st.Bytes > int64(held) {
		t.Errorf("stats %+v: want one entry a session and at most the %d bytes of their last bodies", st, held)
	}
}

// A turn that replaces the one it extends shares that turn's text, not
// the rest of its entry: once dropped, the earlier entry (its tables, its
// chain) is garbage.
func TestMemoDropsReplacedEntries(t *testing.T) {
	m := NewMemo(64 << 20)
	bodies := sessionBodies(1, 4)
	memoParse(t, m, bodies[0]) // the probe
	memoParse(t, m, bodies[1])
	m.mu.Lock()
	first := weak.Make(*m.lru.Value(m.lru.Front()))
	m.mu.Unlock()
	memoParse(t, m, bodies[2])
	memoParse(t, m, bodies[3])
	if st := m.Stats(); st.Entries != 1 {
		t.Fatalf("stats %+v: want the session's last turn alone", st)
	}
	runtime.GC()
	runtime.GC()
	if first.Value() != nil {
		t.Error("a replaced entry is still reachable from the turns that share its text")
	}
	runtime.KeepAlive(m)
}

func TestMemoChain(t *testing.T) {
	m := NewMemo(64 << 20)
	bodies := sessionBodies(1, 3)
	memoParse(t, m, bodies[0])
	r := memoParse(t, m, bodies[1])
	if r.Prior.Chain() != nil {
		t.Fatal("a first turn has no chain to resume")
	}
	c := &Chain{Ends: []int{1, 2, 3, 4}, Blocks: []uint64{7}, BlockBytes: 64}
	r.Prior.Remember(c)
	if next := memoParse(t, m, bodies[2]); next.Prior.Chain() != c {
		t.Fatal("the next turn does not see the chain its predecessor remembered")
	}
}

// FuzzMemoParseChat: reading b after a through a memo reads what ParseChat
// reads, whatever a was, and whether or not a buffer for its decoded
// strings is lent (ParseChatIn) and reused as the body is.
func FuzzMemoParseChat(f *testing.F) {
	bodies := sessionBodies(1, 4)
	f.Add(bodies[1], bodies[2])
	f.Add(bodies[2], bodies[3])
	f.Add(bodies[3], bodies[2])
	f.Add([]byte(`{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"u"},{"role":"user","content":"v"}]}`),
		[]byte(`{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"u"},{"role":"user","content":"v"},{"role":"user","content":"w"}],"messages":null}`))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		m := NewMemo(1 << 20)
		m.min = 0
		// A lent buffer comes full of what it held before.
		lend := func(n int) []byte { return bytes.Repeat([]byte{0xfe}, n)[:0] }
		// Twice: the first is only probed, the second remembered; the
		// first through ParseChat, the second with a lent buffer, which
		// is then reused, as the body is.
		for i := range 2 {
			body, text := bytes.Clone(a), lend(len(a))
			var err error
			if i == 0 {
				_, err = m.ParseChat(body)
			} else {
				_, err = m.ParseChatIn(body, text)
			}
			if err != nil {
				return
			}
			for _, buf := range [][]byte{body, text[:cap(text)]} {
				copy(buf, bytes.Repeat([]byte{'#'}, len(buf)))
			}
		}
		// A buffer that may be too small: the rest is allocated.
		got, gotErr := m.ParseChatIn(bytes.Clone(b), lend(len(b)/2))
		want, wantErr := ParseChat(b)
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("memo %v, plain %v", gotErr, wantErr)
		}
		if gotErr != nil {
			if gotErr.Error() != wantErr.Error() {
				t.Fatalf("memo %v, plain %v", gotErr, wantErr)
			}
			return
		}
		got.Prior = nil
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("memo read\n%+v\nwant\n%+v", got, want)
		}
	})
}

// Bodies that open no conversation the memo has seen (one-off requests,
// first turns) are probed, not copied.
func TestMemoProbesFirstBodies(t *testing.T) {
	m := NewMemo(64 << 20)
	for s := range 50 {
		body := bytes.Replace(sessionBodies(s, 1)[0], []byte("You are a coding agent."), fmt.Appendf(nil, "You are agent %d.", s), 1)
		if r := memoParse(t, m, body); r.Prior != nil {
			t.Fatalf("session %d: a first body has a Prior", s)
		}
	}
	if st := m.Stats(); st.Entries != 50 || st.Bytes > 50*64 {
		t.Errorf("stats %+v: want 50 probes of a few bytes each", st)
	}
}
