package sim

import (
	"bytes"
	"context"
	"encoding/binary"
	"reflect"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"
)

func TestEventBatchEncoding(t *testing.T) {
	l := &eventLog{blockSize: 2}
	l.stored(11, 0, false, []uint32{1, 2})
	l.stored(12, 11, true, []uint32{3, 4}) // chains onto the first: merged
	l.removed(7)
	l.removed(8) // merged
	l.stored(1<<63+5, 99, true, []uint32{5, 6})
	l.storedLoRA(13, 0, false, []uint32{7, 8}, 3, "sql") // an adapter's: its id and name
	l.cleared()

	var buf bytes.Buffer
	if err := l.encode(msgpack.NewEncoder(&buf), 1.5); err != nil {
		t.Fatal(err)
	}
	var got []any
	if err := msgpack.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := []any{
		1.5,
		[]any{
			[]any{"BlockStored", []any{uint64(11), uint64(12)}, nil, []any{uint64(1), uint64(2), uint64(3), uint64(4)}, int64(2), nil, "GPU", nil},
			[]any{"BlockRemoved", []any{uint64(7), uint64(8)}, "GPU"},
			[]any{"BlockStored", []any{uint64(1<<63 + 5)}, uint64(99), []any{uint64(5), uint64(6)}, int64(2), nil, "GPU", nil},
			[]any{"BlockStored", []any{uint64(13)}, nil, []any{uint64(7), uint64(8)}, int64(2), int64(3), "GPU", "sql"},
			[]any{"AllBlocksCleared"},
		},
		nil,
	}
	if !reflect.DeepEqual(normalize(got), normalize(want)) {
		t.Errorf("decoded\n%#v\nwant\n%#v", got, want)
	}
}

// normalize maps msgpack's compact integer types onto int64/uint64 so the
// comparison is about values, not encodings.
func normalize(v any) any {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = normalize(x[i])
		}
		return out
	case int8:
		return int64(x)
	case int16:
		return int64(x)
	case int32:
		return int64(x)
	case int64:
		return x
	case uint8:
		return uint64(x)
	case uint16:
		return uint64(x)
	case uint32:
		return uint64(x)
	}
	return v
}

func TestKVEventsPublished(t *testing.T) {
	e, srv := newTestEngine(t, Config{KVEventsAddr: "tcp://127.0.0.1:0", NumBlocks: 64})
	addr := e.KVEventsAddr()
	if addr == "" || addr == "tcp://127.0.0.1:0" {
		t.Fatalf("bound address %q", addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sub := zmq4.NewSub(ctx)
	defer sub.Close()
	if err := sub.Dial(addr); err != nil {
		t.Fatal(err)
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, DefaultKVEventsTopic); err != nil {
		t.Fatal(err)
	}
	got := make(chan zmq4.Msg, 1)
	go func() {
		msg, err := sub.Recv()
		if err == nil {
			got <- msg
		}
	}()
	// A subscription takes a moment to reach the publisher: send requests
	// until one batch arrives. Each prompt is new, since a cached one
	// stores no blocks and so publishes nothing.
	var msg zmq4.Msg
	var sent []string
	for seed := 2; msg.Frames == nil; seed++ {
		p := prompt(seed, 200) // 50 tokens: 3 full blocks
		sent = append(sent, p)
		post(t, srv.URL+"/v1/completions", `{"prompt":"`+p+`","max_tokens":4}`).Body.Close()
		select {
		case msg = <-got:
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal("no KV event batch received")
		}
	}
	if len(msg.Frames) != 3 || string(msg.Frames[0]) != DefaultKVEventsTopic || len(msg.Frames[1]) != 8 {
		t.Fatalf("frames %q", msg.Frames)
	}
	_ = binary.BigEndian.Uint64(msg.Frames[1])
	var batch []any
	if err := msgpack.Unmarshal(msg.Frames[2], &batch); err != nil {
		t.Fatal(err)
	}
	if len(batch) != 3 {
		t.Fatalf("batch %#v", batch)
	}
	events := batch[1].([]any)
	first := events[0].([]any)
	if first[0] != EventBlockStored || first[2] != nil || normalize(first[4]) != int64(16) || first[6] != "GPU" {
		t.Errorf("first event %#v", first)
	}
	h := normalize(first[1].([]any)[0])
	matched := false
	for _, p := range sent {
		matched = matched || h == BlockHash(0, Tokenize(p)[:16])
	}
	if !matched {
		t.Errorf("first block hash %v, want BlockHash of a sent prompt's first 16 tokens", h)
	}

	// Resetting an idle engine's cache clears everything.
	if err := e.ResetPrefixCache(ctx); err != nil {
		t.Fatal(err)
	}
}
