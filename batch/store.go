package batch

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/turnpike-gateway/turnpike/state"
)

// The key layout of the batch namespace:
//
//	f/<file id>                  fileRecord (JSON)
//	c/<file id>/<chunk, 8 digits> the file's content, in chunkBytes pieces
//	ft/<tenant>\x00<file id>     the tenant's files, for listing
//	b/<batch id>                 batchRecord (JSON)
//	bt/<tenant>\x00<batch id>    the tenant's batches, for listing
//	r/<batch id>/<line, 8 digits> a request's result: 'o' (2xx) or 'e',
//	                             then its OutputLine (JSON)
//
// Ids begin with their creation time in hex, so a tenant's index lists
// them oldest first and a reverse scan newest first.
const chunkBytes = 1 << 20

type fileRecord struct {
	File   File   `json:"file"`
	Tenant string `json:"tenant"`
	Chunks int    `json:"chunks"`
}

type batchRecord struct {
	Batch  Batch  `json:"batch"`
	Tenant string `json:"tenant"`
}

// store is the batch namespace with its key layout.
type store struct{ ns state.Namespace }

func fileKey(id string) []byte { return []byte("f/" + id) }
func chunkKey(id string, i int) []byte {
	return fmt.Appendf(nil, "c/%s/%08d", id, i)
}
func chunkPrefix(id string) []byte              { return []byte("c/" + id + "/") }
func fileIndexKey(tenant, id string) []byte     { return []byte("ft/" + tenant + "\x00" + id) }
func fileIndexPrefix(tenant string) []byte      { return []byte("ft/" + tenant + "\x00") }
func batchKey(id string) []byte                 { return []byte("b/" + id) }
func batchIndexKey(tenant, id string) []byte    { return []byte("bt/" + tenant + "\x00" + id) }
func batchIndexPrefix(tenant string) []byte     { return []byte("bt/" + tenant + "\x00") }
func resultKey(batchID string, line int) []byte { return fmt.Appendf(nil, "r/%s/%08d", batchID, line) }
func resultPrefix(batchID string) []byte        { return []byte("r/" + batchID + "/") }

// newID is prefix, the time in hex and 8 random bytes in hex.
func newID(prefix string, now time.Time) string {
	var r [8]byte
	rand.Read(r[:])
	return fmt.Sprintf("%s%015x%s", prefix, now.UnixNano(), hex.EncodeToString(r[:]))
}

// putFile stores a file whole, durably, in one batch.
func (s *store) putFile(ctx context.Context, rec *fileRecord, content []byte, b *state.Batch) error {
	for i := 0; i*chunkBytes < len(content) || i == 0; i++ {
		end := min((i+1)*chunkBytes, len(content))
		b.Put(chunkKey(rec.File.ID, i), content[i*chunkBytes:end])
		rec.Chunks = i + 1
	}
	v, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	b.Put(fileKey(rec.File.ID), v)
	b.Put(fileIndexKey(rec.Tenant, rec.File.ID), nil)
	return nil
}

// file reads a file's record; another tenant's file is not found.
func (s *store) file(ctx context.Context, tenant, id string) (*fileRecord, error) {
	v, err := s.ns.Get(ctx, fileKey(id))
	if err != nil {
		return nil, err
	}
	var rec fileRecord
	if err := json.Unmarshal(v, &rec); err != nil {
		return nil, fmt.Errorf("batch: file %s: %w", id, err)
	}
	if tenant != "" && rec.Tenant != tenant {
		return nil, state.ErrNotFound
	}
	return &rec, nil
}

// content reads a file's content whole.
func (s *store) content(ctx context.Context, rec *fileRecord) ([]byte, error) {
	out := make([]byte, 0, rec.File.Bytes)
	err := s.ns.Scan(ctx, state.Prefix(chunkPrefix(rec.File.ID)), func(_, v []byte) error {
		out = append(out, v...)
		return nil
	})
	if err == nil && int64(len(out)) != rec.File.Bytes {
		err = fmt.Errorf("batch: file %s holds %d bytes, its record says %d", rec.File.ID, len(out), rec.File.Bytes)
	}
	return out, err
}

func (s *store) deleteFile(ctx context.Context, rec *fileRecord) error {
	var b state.Batch
	b.Sync = true
	b.DeletePrefix(chunkPrefix(rec.File.ID))
	b.Delete(fileKey(rec.File.ID))
	b.Delete(fileIndexKey(rec.Tenant, rec.File.ID))
	return s.ns.Apply(ctx, &b)
}

func (s *store) batch(ctx context.Context, tenant, id string) (*batchRecord, error) {
	v, err := s.ns.Get(ctx, batchKey(id))
	if err != nil {
		return nil, err
	}
	var rec batchRecord
	if err := json.Unmarshal(v, &rec); err != nil {
		return nil, fmt.Errorf("batch: batch %s: %w", id, err)
	}
	if tenant != "" && rec.Tenant != tenant {
		return nil, state.ErrNotFound
	}
	return &rec, nil
}

// putBatch adds the batch's record (and, when index, its tenant index
// entry) to b.
func putBatch(b *state.Batch, rec *batchRecord, index bool) error {
	v, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	b.Put(batchKey(rec.Batch.ID), v)
	if index {
		b.Put(batchIndexKey(rec.Tenant, rec.Batch.ID), nil)
	}
	return nil
}

// list reads up to most ids of a tenant's index (most <= 0: all), newest
// first, from just before after ("" for the newest).
func (s *store) list(ctx context.Context, prefix []byte, after string, most int) ([]string, error) {
	r := state.Prefix(prefix)
	r.Reverse = true
	if after != "" {
		r.End = append(bytes.Clone(prefix), after...)
	}
	var ids []string
	err := s.ns.Scan(ctx, r, func(k, _ []byte) error {
		ids = append(ids, string(k[len(prefix):]))
		if len(ids) == most {
			return errStop
		}
		return nil
	})
	if errors.Is(err, errStop) {
		err = nil
	}
	return ids, err
}

// unfinished lists the batches that have not ended, for Start to resume.
func (s *store) unfinished(ctx context.Context) ([]*batchRecord, error) {
	var out []*batchRecord
	err := s.ns.Scan(ctx, state.Prefix([]byte("b/")), func(_, v []byte) error {
		var rec batchRecord
		if err := json.Unmarshal(v, &rec); err != nil {
			return err
		}
		if !terminal(rec.Batch.Status) {
			out = append(out, &rec)
		}
		return nil
	})
	return out, err
}

// results reads a batch's stored results, in line order.
func (s *store) results(ctx context.Context, batchID string, fn func(line int, ok bool, out []byte) error) error {
	p := resultPrefix(batchID)
	return s.ns.Scan(ctx, state.Prefix(p), func(k, v []byte) error {
		var line int
		if _, err := fmt.Sscanf(string(k[len(p):]), "%d", &line); err != nil || len(v) == 0 {
			return fmt.Errorf("batch: bad result key %q", k)
		}
		return fn(line, v[0] == 'o', v[1:])
	})
}
