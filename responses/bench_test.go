package responses

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/turnpike-gateway/turnpike/responses/wire"
	"github.com/turnpike-gateway/turnpike/state"
	"github.com/turnpike-gateway/turnpike/state/redistest"
)

// benchBackends are the state stores the store benchmarks run on, side by
// side: the embedded Pebble, and a redis-server of its own on loopback
// (appendfsync always, so that a synced batch is on disk when it returns,
// as with Pebble). The Redis ones are skipped without redis-server.
var benchBackends = []struct {
	name string
	open func(b *testing.B) *testStore
}{
	{"pebble", func(b *testing.B) *testStore { return openStore(b, b.TempDir()) }},
	{"redis", func(b *testing.B) *testStore {
		srv := redistest.Start(b)
		db, err := state.OpenRedis(context.Background(), srv.URL(), state.RedisOptions{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { db.Close() })
		return &testStore{StateStore: NewStore(db.Namespace("rs/"), StoreOptions{}), db: db}
	}},
}

// benchItems are a turn's items: a user message and an answer.
func benchItems(i int) []wire.Item {
	text := strings.Repeat("token ", 100)
	return []wire.Item{
		{Type: wire.ItemMessage, ID: newID("msg_"), Status: wire.StatusCompleted, Role: "user", Content: []wire.ContentPart{{Type: "input_text", Text: fmt.Sprint("turn ", i, " ", text)}}},
		{Type: wire.ItemMessage, ID: newID("msg_"), Status: wire.StatusCompleted, Role: "assistant", Content: []wire.ContentPart{{Type: "output_text", Text: text}}},
	}
}

func benchRecord(tenant string) *Record {
	return &Record{Tenant: tenant, Response: &wire.Response{ID: newID("resp_"), Object: "response", Status: wire.StatusCompleted, Store: true, Output: []wire.Item{}}}
}

// BenchmarkStorePut ends responses, each a synced batch of its record
// and two items: one writer at a time ("serial"), and many goroutines at
// once ("parallel"), where Pebble's commit pipeline shares each WAL sync
// among the batches waiting for it, and Redis one AOF fsync among the
// writes of one event-loop turn. On each backend.
func BenchmarkStorePut(b *testing.B) {
	for _, bc := range []struct {
		name        string
		parallelism int
	}{{"serial", 0}, {"parallel", 16}} {
		b.Run(bc.name, func(b *testing.B) {
			for _, be := range benchBackends {
				b.Run(be.name, func(b *testing.B) { benchStorePut(b, be.open(b), bc.parallelism) })
			}
		})
	}
}

func benchStorePut(b *testing.B, st *testStore, parallelism int) {
	defer st.Close()
	ctx := context.Background()
	b.ReportAllocs()
	if parallelism == 0 {
		for i := 0; b.Loop(); i++ {
			if err := st.EndResponse(ctx, benchRecord("bench"), nil, benchItems(i), nil); err != nil {
				b.Fatal(err)
			}
		}
		return
	}
	b.SetParallelism(parallelism)
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			if err := st.EndResponse(ctx, benchRecord("bench"), nil, benchItems(i), nil); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkChainLoad rebuilds the context of the 200th turn of a
// conversation chained by previous_response_id, on each backend.
func BenchmarkChainLoad(b *testing.B) {
	for _, be := range benchBackends {
		b.Run(be.name, func(b *testing.B) { benchChainLoad(b, be.open(b)) })
	}
}

func benchChainLoad(b *testing.B, st *testStore) {
	defer st.Close()
	ctx := context.Background()
	var base []Segment
	for i := range 200 {
		rec := benchRecord("bench")
		if err := st.EndResponse(ctx, rec, base, benchItems(i), nil); err != nil {
			b.Fatal(err)
		}
		base = rec.Context
	}
	if len(base) != 1 || base[0].To != 400 {
		b.Fatalf("manifest %+v, want one segment of 400 items", base)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		items, err := st.LoadContext(ctx, base)
		if err != nil || len(items) != 400 {
			b.Fatal(len(items), err)
		}
	}
}
