package batch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/labstack/echo/v4"
	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/jobs"
	"github.com/turnpike-gateway/turnpike/state"
)

// The endpoints a batch may be for.
const (
	EndpointChatCompletions = "/v1/chat/completions"
	EndpointCompletions     = "/v1/completions"
)

// CompletionWindow is the only completion_window accepted, as OpenAI's.
const CompletionWindow = "24h"

// Register mounts the Files and Batch API on g (the /v1 group, behind the
// gateway's authentication); tenant names the tenant of a request.
func (s *Service) Register(g *echo.Group, tenant func(echo.Context) string) {
	h := &api{s: s, tenant: tenant}
	g.POST("/files", h.uploadFile)
	g.GET("/files", h.listFiles)
	g.GET("/files/:id", h.getFile)
	g.GET("/files/:id/content", h.fileContent)
	g.DELETE("/files/:id", h.deleteFile)
	g.POST("/batches", h.createBatch)
	g.GET("/batches", h.listBatches)
	g.GET("/batches/:id", h.getBatch)
	g.POST("/batches/:id/cancel", h.cancelBatch)
}

type api struct {
	s      *Service
	tenant func(echo.Context) string
}

// storeError maps a store failure: not found is a 404 naming what.
func storeError(err error, param, what string) error {
	if errors.Is(err, state.ErrNotFound) {
		return apierror.NotFound(param, "not_found", "No %s found with that id.", what)
	}
	if errors.Is(err, state.ErrClosed) {
		return apierror.Unavailable("unavailable", "The state store is closed; retry on another gateway.")
	}
	return apierror.Internal(err)
}

func (h *api) uploadFile(c echo.Context) error {
	purpose := c.FormValue("purpose")
	fh, err := c.FormFile("file")
	switch {
	case errors.Is(err, http.ErrNotMultipart), errors.Is(err, http.ErrMissingBoundary):
		return apierror.Invalid("", "invalid_request", "Upload a file as multipart/form-data with the fields 'file' and 'purpose'.")
	case err != nil:
		return apierror.Invalid("file", "missing_required_parameter", "Missing required parameter: 'file'.")
	case purpose == "":
		return apierror.Invalid("purpose", "missing_required_parameter", "Missing required parameter: 'purpose'.")
	case purpose != PurposeBatch:
		return apierror.Invalid("purpose", "invalid_value", "Invalid purpose '%s': this server accepts files for 'batch' only.", purpose)
	case fh.Size > h.s.opts.MaxFileBytes:
		return apierror.Invalid("file", "file_too_large", "The file is %d bytes; the most accepted is %d.", fh.Size, h.s.opts.MaxFileBytes)
	}
	f, err := fh.Open()
	if err != nil {
		return apierror.Internal(err)
	}
	defer f.Close()
	content, err := io.ReadAll(io.LimitReader(f, h.s.opts.MaxFileBytes+1))
	switch {
	case err != nil:
		return apierror.Internal(err)
	case int64(len(content)) > h.s.opts.MaxFileBytes:
		return apierror.Invalid("file", "file_too_large", "The file is larger than %d bytes, the most accepted.", h.s.opts.MaxFileBytes)
	case len(bytes.TrimSpace(content)) == 0:
		return apierror.Invalid("file", "empty_file", "The file is empty.")
	case !utf8.Valid(content):
		return apierror.Invalid("file", "invalid_file_format", "A batch file must be JSONL in UTF-8.")
	}
	now := h.s.now()
	rec := &fileRecord{Tenant: h.tenant(c), File: File{
		ID: newID("file-", now), Object: "file", Bytes: int64(len(content)), CreatedAt: now.Unix(),
		Filename: fh.Filename, Purpose: purpose, Status: "processed",
	}}
	b := state.Batch{Sync: true}
	if err := h.s.store.putFile(c.Request().Context(), rec, content, &b); err != nil {
		return apierror.Internal(err)
	}
	if err := h.s.store.ns.Apply(c.Request().Context(), &b); err != nil {
		return storeError(err, "", "file")
	}
	return c.JSON(http.StatusOK, rec.File)
}

func (h *api) getFile(c echo.Context) error {
	rec, err := h.s.store.file(c.Request().Context(), h.tenant(c), c.Param("id"))
	if err != nil {
		return storeError(err, "file_id", "file")
	}
	return c.JSON(http.StatusOK, rec.File)
}

func (h *api) fileContent(c echo.Context) error {
	ctx := c.Request().Context()
	rec, err := h.s.store.file(ctx, h.tenant(c), c.Param("id"))
	if err != nil {
		return storeError(err, "file_id", "file")
	}
	content, err := h.s.store.content(ctx, rec)
	if err != nil {
		return storeError(err, "file_id", "file")
	}
	return c.Blob(http.StatusOK, "application/jsonl", content)
}

func (h *api) deleteFile(c echo.Context) error {
	ctx := c.Request().Context()
	rec, err := h.s.store.file(ctx, h.tenant(c), c.Param("id"))
	if err != nil {
		return storeError(err, "file_id", "file")
	}
	if err := h.s.store.deleteFile(ctx, rec); err != nil {
		return storeError(err, "file_id", "file")
	}
	return c.JSON(http.StatusOK, map[string]any{"id": rec.File.ID, "object": "file", "deleted": true})
}

// pageParams reads limit (1–100, default 20; 10,000 for files, as OpenAI)
// and after.
func pageParams(c echo.Context, def, most int) (int, string, error) {
	limit := def
	if v := c.QueryParam("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > most {
			return 0, "", apierror.Invalid("limit", "invalid_value", "limit must be an integer from 1 to %d.", most)
		}
		limit = n
	}
	return limit, c.QueryParam("after"), nil
}

// page is a list answer.
type page[T any] struct {
	Object  string  `json:"object"`
	Data    []T     `json:"data"`
	FirstID *string `json:"first_id"`
	LastID  *string `json:"last_id"`
	HasMore bool    `json:"has_more"`
}

func newPage[T any](items []T, id func(T) string, more bool) page[T] {
	p := page[T]{Object: "list", Data: items, HasMore: more}
	if p.Data == nil {
		p.Data = []T{}
	}
	if len(items) > 0 {
		p.FirstID, p.LastID = ptr(id(items[0])), ptr(id(items[len(items)-1]))
	}
	return p
}

func (h *api) listFiles(c echo.Context) error {
	ctx := c.Request().Context()
	limit, after, err := pageParams(c, 10_000, 10_000)
	if err != nil {
		return err
	}
	purpose := c.QueryParam("purpose")
	most := limit + 1
	if purpose != "" {
		most = 0
	}
	ids, err := h.s.store.list(ctx, fileIndexPrefix(h.tenant(c)), after, most)
	var out []File
	more := false
	for _, id := range ids {
		rec, ferr := h.s.store.file(ctx, "", id)
		if ferr != nil || (purpose != "" && rec.File.Purpose != purpose) {
			continue
		}
		if len(out) == limit {
			more = true
			break
		}
		out = append(out, rec.File)
	}
	if err != nil {
		return storeError(err, "", "file")
	}
	return c.JSON(http.StatusOK, newPage(out, func(f File) string { return f.ID }, more))
}

// createRequest is the body of POST /v1/batches.
type createRequest struct {
	InputFileID      *string           `json:"input_file_id"`
	Endpoint         *string           `json:"endpoint"`
	CompletionWindow *string           `json:"completion_window"`
	Metadata         map[string]string `json:"metadata"`
}

// validate reports the first problem of a create request as a 400.
func (r *createRequest) validate() error {
	switch {
	case r.InputFileID == nil || *r.InputFileID == "":
		return apierror.Invalid("input_file_id", "missing_required_parameter", "Missing required parameter: 'input_file_id'.")
	case r.Endpoint == nil || *r.Endpoint == "":
		return apierror.Invalid("endpoint", "missing_required_parameter", "Missing required parameter: 'endpoint'.")
	case *r.Endpoint != EndpointChatCompletions && *r.Endpoint != EndpointCompletions:
		return apierror.Invalid("endpoint", "invalid_value", "Invalid endpoint '%s': this server runs batches for '%s' and '%s'.", *r.Endpoint, EndpointChatCompletions, EndpointCompletions)
	case r.CompletionWindow == nil || *r.CompletionWindow == "":
		return apierror.Invalid("completion_window", "missing_required_parameter", "Missing required parameter: 'completion_window'.")
	case *r.CompletionWindow != CompletionWindow:
		return apierror.Invalid("completion_window", "invalid_value", "Invalid completion_window '%s': the only one supported is '%s'.", *r.CompletionWindow, CompletionWindow)
	case len(r.Metadata) > maxMetadataPairs:
		return apierror.Invalid("metadata", "invalid_value", "metadata holds %d pairs; at most %d are allowed.", len(r.Metadata), maxMetadataPairs)
	}
	for k, v := range r.Metadata {
		if len(k) > maxMetadataKeyBytes || len(v) > maxMetadataValueBytes {
			return apierror.Invalid("metadata", "invalid_value", "metadata keys are at most %d bytes and values at most %d.", maxMetadataKeyBytes, maxMetadataValueBytes)
		}
	}
	return nil
}

func (h *api) createBatch(c echo.Context) error {
	ctx := c.Request().Context()
	var req createRequest
	if err := decodeJSON(c, &req); err != nil {
		return err
	}
	if err := req.validate(); err != nil {
		return err
	}
	tenant := h.tenant(c)
	file, err := h.s.store.file(ctx, tenant, *req.InputFileID)
	if err != nil {
		return storeError(err, "input_file_id", "file")
	}
	if file.File.Purpose != PurposeBatch {
		return apierror.Invalid("input_file_id", "invalid_value", "File %s has purpose '%s'; a batch's input must have purpose 'batch'.", file.File.ID, file.File.Purpose)
	}
	now := h.s.now()
	rec := &batchRecord{Tenant: tenant, Batch: Batch{
		ID: newID("batch_", now), Object: "batch", Endpoint: *req.Endpoint, InputFileID: file.File.ID,
		CompletionWindow: *req.CompletionWindow, Status: StatusValidating, CreatedAt: now.Unix(),
		ExpiresAt: ptr(now.Add(h.s.opts.Window).Unix()), Metadata: req.Metadata,
	}}
	b := state.Batch{Sync: true}
	if err := putBatch(&b, rec, true); err != nil {
		return apierror.Internal(err)
	}
	snapshot := rec.Batch
	err = h.s.jobs.Enqueue(ctx, rec.Batch.ID, &job{s: h.s, rec: rec}, func(ctx context.Context) error {
		return h.s.store.ns.Apply(ctx, &b)
	}, h.s.runJob)
	switch {
	case errors.Is(err, jobs.ErrNotRunning):
		return apierror.Unavailable("unavailable", "The batch service is not running on this gateway; retry later.")
	case err != nil:
		return storeError(err, "", "batch")
	}
	return c.JSON(http.StatusOK, snapshot)
}

// decodeJSON decodes a JSON object body into v, or answers a 400.
func decodeJSON(c echo.Context, v any) error {
	body, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return apierror.Invalid("", "invalid_json", "The body is not a valid JSON object: %v.", err)
	}
	return nil
}

// batch reads a batch: the running job's record when this gateway runs
// it, else the stored one.
func (h *api) batch(c echo.Context) (*batchRecord, *job, error) {
	id := c.Param("id")
	rec, err := h.s.store.batch(c.Request().Context(), h.tenant(c), id)
	if err != nil {
		return nil, nil, storeError(err, "batch_id", "batch")
	}
	return rec, h.s.running(id), nil
}

func (h *api) getBatch(c echo.Context) error {
	rec, j, err := h.batch(c)
	if err != nil {
		return err
	}
	if j != nil {
		return c.JSON(http.StatusOK, j.snapshot())
	}
	return c.JSON(http.StatusOK, rec.Batch)
}

func (h *api) cancelBatch(c echo.Context) error {
	ctx := c.Request().Context()
	rec, j, err := h.batch(c)
	if err != nil {
		return err
	}
	if j != nil {
		b, err := j.requestCancel(ctx)
		if err != nil {
			return storeError(err, "batch_id", "batch")
		}
		if terminal(b.Status) && b.Status != StatusCancelled {
			return apierror.Conflict("batch_id", "invalid_state", "Cannot cancel a batch with status '%s'.", b.Status)
		}
		return c.JSON(http.StatusOK, b)
	}
	switch {
	case rec.Batch.Status == StatusCancelled || rec.Batch.Status == StatusCancelling:
		return c.JSON(http.StatusOK, rec.Batch)
	case terminal(rec.Batch.Status):
		return apierror.Conflict("batch_id", "invalid_state", "Cannot cancel a batch with status '%s'.", rec.Batch.Status)
	}
	// No runner here (it runs nowhere, or on another gateway): mark it;
	// the runner that resumes it ends it cancelled, and a runner on
	// another gateway finds the request at its next renewal.
	now := h.s.now().Unix()
	rec.Batch.Status, rec.Batch.CancellingAt = StatusCancelling, &now
	b := state.Batch{Sync: true}
	if err := putBatch(&b, rec, false); err != nil {
		return apierror.Internal(err)
	}
	b.Put(jobKeys.CancelKey(rec.Batch.ID), []byte{1})
	if err := h.s.store.ns.Apply(ctx, &b); err != nil {
		return storeError(err, "batch_id", "batch")
	}
	return c.JSON(http.StatusOK, rec.Batch)
}

func (h *api) listBatches(c echo.Context) error {
	ctx := c.Request().Context()
	limit, after, err := pageParams(c, 20, 100)
	if err != nil {
		return err
	}
	ids, err := h.s.store.list(ctx, batchIndexPrefix(h.tenant(c)), after, limit+1)
	if err != nil {
		return storeError(err, "", "batch")
	}
	more := len(ids) > limit
	ids = ids[:min(len(ids), limit)]
	out := make([]Batch, 0, len(ids))
	for _, id := range ids {
		rec, err := h.s.store.batch(ctx, "", id)
		if err != nil {
			continue
		}
		if j := h.s.running(id); j != nil {
			rec.Batch = j.snapshot()
		}
		out = append(out, rec.Batch)
	}
	return c.JSON(http.StatusOK, newPage(out, func(b Batch) string { return b.ID }, more))
}
