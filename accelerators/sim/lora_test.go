package sim

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

func loraConfig(slots int, runtime bool, adapters ...string) Config {
	cfg := Config{MaxLoRAs: slots, RuntimeLoRALoading: runtime}
	for _, a := range adapters {
		cfg.LoRAAdapters = append(cfg.LoRAAdapters, LoRAAdapter{Name: a})
	}
	return cfg
}

func loraChat(t *testing.T, srv string, model, content string) (*http.Response, chatResult) {
	t.Helper()
	resp := post(t, srv+"/v1/chat/completions", strings.Replace(chatBody(content, `,"max_tokens":4`), `"llama-3.1-8b"`, `"`+model+`"`, 1))
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return resp, chatResult{}
	}
	return resp, decode[chatResult](t, resp)
}

func modelIDs(t *testing.T, srv string) []string {
	t.Helper()
	resp, err := http.Get(srv + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	list := decode[modelList](t, resp)
	var out []string
	for _, c := range list.Data {
		id := c.ID
		if c.Parent != nil {
			id += "<" + *c.Parent
		}
		out = append(out, id)
	}
	return out
}

func metricsText(t *testing.T, srv string) string {
	t.Helper()
	resp, err := http.Get(srv + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestLoRANotLoadedIs404WithoutRuntimeLoading(t *testing.T) {
	_, srv := newTestEngine(t, loraConfig(2, false, "sql"))
	if resp, _ := loraChat(t, srv.URL, "sql", "hello"); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("adapter not loaded: status %d, want 404", resp.StatusCode)
	}
	resp := post(t, srv.URL+LoadLoRAPath, `{"lora_name":"sql","lora_path":"/adapters/sql"}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("load: status %d", resp.StatusCode)
	}
	if resp, _ := loraChat(t, srv.URL, "sql", "hello"); resp.StatusCode != http.StatusOK {
		t.Fatalf("adapter loaded: status %d", resp.StatusCode)
	}
	if got, want := strings.Join(modelIDs(t, srv.URL), " "), "llama-3.1-8b sql<llama-3.1-8b"; got != want {
		t.Errorf("/v1/models: %s, want %s", got, want)
	}
	resp = post(t, srv.URL+LoadLoRAPath, `{"lora_name":"sql","lora_path":"/adapters/sql"}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("second load: status %d, want 400", resp.StatusCode)
	}
	resp = post(t, srv.URL+UnloadLoRAPath, `{"lora_name":"sql"}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("unload: status %d", resp.StatusCode)
	}
	resp = post(t, srv.URL+UnloadLoRAPath, `{"lora_name":"sql"}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("second unload: status %d, want 404", resp.StatusCode)
	}
	if resp, _ := loraChat(t, srv.URL, "nope", "hello"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown model: status %d, want 404", resp.StatusCode)
	}
}

func TestLoRASlotsUnloadLeastRecentlyUsed(t *testing.T) {
	e, srv := newTestEngine(t, loraConfig(2, true, "a", "b", "c"))
	for _, m := range []string{"a", "b", "a", "c"} {
		if resp, _ := loraChat(t, srv.URL, m, "hello "+m); resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d", m, resp.StatusCode)
		}
	}
	// c took b's slot: a was used after b.
	if got := strings.Join(e.LoadedAdapters(), ","); got != "a,c" {
		t.Errorf("loaded %s, want a,c", got)
	}
	text := metricsText(t, srv.URL)
	if !strings.Contains(text, `sim_lora_loads_total{model_name="llama-3.1-8b"} 3`) {
		t.Errorf("loads not counted:\n%s", grep(text, "lora"))
	}
	if !strings.Contains(text, `vllm:lora_requests_info{max_lora="2",running_lora_adapters="",waiting_lora_adapters=""}`) {
		t.Errorf("lora requests info missing:\n%s", grep(text, "lora_requests_info"))
	}
}

// While a request runs with an adapter, its label says so; requests that
// arrive during a load wait on that one load.
func TestLoRAConcurrentRequestsShareOneLoad(t *testing.T) {
	cfg := loraConfig(1, true, "a")
	cfg.TimeScale = 0.05 // a 512 MiB adapter at 1 GB/s: about 27 ms
	e, srv := newTestEngine(t, cfg)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp, _ := loraChat(t, srv.URL, "a", strings.Repeat("x", i+1)); resp.StatusCode != http.StatusOK {
				t.Errorf("status %d", resp.StatusCode)
			}
		}()
	}
	wg.Wait()
	text := metricsText(t, srv.URL)
	if !strings.Contains(text, `sim_lora_loads_total{model_name="llama-3.1-8b"} 1`) {
		t.Errorf("want one load:\n%s", grep(text, "sim_lora"))
	}
	if !strings.Contains(text, `sim_lora_load_waits_total{model_name="llama-3.1-8b"} 4`) {
		t.Errorf("want four requests that waited:\n%s", grep(text, "sim_lora"))
	}
	_ = e
	// A busy adapter is not unloaded: a load of another waits for it.
	e.lora.mu.Lock()
	e.lora.mu.loaded["a"].refs++
	e.lora.mu.Unlock()
	done := make(chan int)
	go func() {
		resp := post(t, srv.URL+LoadLoRAPath, `{"lora_name":"b","lora_path":"/b"}`)
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	select {
	case st := <-done:
		t.Fatalf("load into a full set of busy slots returned %d", st)
	case <-time.After(50 * time.Millisecond):
	}
	e.lora.release("a")
	select {
	case st := <-done:
		if st != http.StatusOK {
			t.Errorf("load: status %d", st)
		}
	case <-time.After(time.Minute):
		t.Fatal("load did not finish once the slot was free")
	}
}

// An adapter's KV blocks are its own: the base model's cached prefix is
// no hit for it, its own is.
func TestLoRAPrefixIsSeparate(t *testing.T) {
	_, srv := newTestEngine(t, loraConfig(2, true, "a"))
	p := prompt(3, 800)
	if _, r := loraChat(t, srv.URL, "llama-3.1-8b", p); r.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Fatalf("cold base: %d cached", r.Usage.PromptTokensDetails.CachedTokens)
	}
	if _, r := loraChat(t, srv.URL, "a", p); r.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Errorf("adapter after base: %d cached, want 0", r.Usage.PromptTokensDetails.CachedTokens)
	}
	if _, r := loraChat(t, srv.URL, "a", p); r.Usage.PromptTokensDetails.CachedTokens == 0 {
		t.Errorf("adapter after adapter: nothing cached")
	}
}
