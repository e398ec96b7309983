package sim

import (
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/accelerators"
)

// bootstrapExtra is the bootstrap fields naming the prefill server at
// url and room.
func bootstrapExtra(t *testing.T, url string, room uint64) string {
	t.Helper()
	host, port, err := net.SplitHostPort(strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf(`,"bootstrap_host":%q,"bootstrap_port":%s,"bootstrap_room":%d`, host, port, room)
}

// errorResult is the error shape the tests read.
type errorResult struct {
	Error struct {
		Message string  `json:"message"`
		Param   *string `json:"param"`
	} `json:"error"`
}

// TestSGLangBothLegsAtOnce: the same request, with the bootstrap fields,
// goes to a prefill and a decode engine at once; the decoder's leg, sent
// first, waits for the room, pulls its KV instead of prefilling and
// answers what a whole engine answers; the prefill engine answers one
// token and holds nothing after the pull.
func TestSGLangBothLegsAtOnce(t *testing.T) {
	const seed = 11
	sg := Config{Flavor: FlavorSGLang, Seed: seed}
	pcfg, dcfg := sg, sg
	pcfg.Role, dcfg.Role = RolePrefill, RoleDecode
	pe, err := New(pcfg)
	if err != nil {
		t.Fatal(err)
	}
	asked := make(chan struct{})
	var once sync.Once
	psrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == BootstrapPath {
			once.Do(func() { close(asked) })
		}
		pe.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		psrv.Close()
		pe.Close()
	})
	de, dsrv := newTestEngine(t, dcfg)
	_, bsrv := newTestEngine(t, sg)
	content := prompt(3, 16000) // about 4k tokens
	const room = math.MaxInt64 - 5
	extra := bootstrapExtra(t, psrv.URL, room) + `,"max_tokens":20,"ignore_eos":true`

	got := make(chan chatResult, 1)
	go func() {
		resp, err := http.Post(dsrv.URL+"/v1/chat/completions", "application/json", strings.NewReader(chatBody(content, extra)))
		if err != nil {
			got <- chatResult{}
			return
		}
		defer resp.Body.Close()
		var r chatResult
		json.NewDecoder(resp.Body).Decode(&r)
		got <- r
	}()
	// The decoder is waiting at the bootstrap endpoint before the prefill
	// leg is sent.
	<-asked
	pr := decode[prefillResult](t, post(t, psrv.URL+"/v1/chat/completions", chatBody(content, extra)))
	if pr.Usage.CompletionTokens != 1 || pr.KVTransferParams != nil {
		t.Errorf("prefill answer: %d completion tokens, params %v: want one token and no kv_transfer_params", pr.Usage.CompletionTokens, pr.KVTransferParams)
	}
	d := <-got
	whole := decode[chatResult](t, post(t, bsrv.URL+"/v1/chat/completions", chatBody(content, extra)))
	if len(d.Choices) == 0 || len(whole.Choices) == 0 || *d.Choices[0].Message.Content != *whole.Choices[0].Message.Content {
		t.Fatalf("decode answer %+v differs from the whole engine's %+v", d, whole)
	}
	if d.Usage.CompletionTokens != 20 || d.Usage.PromptTokens != whole.Usage.PromptTokens {
		t.Errorf("decode usage %+v", d.Usage)
	}
	model, _ := accelerators.LookupModel(DefaultModel)
	if sum, want := histogramSum(t, de, "vllm:nixl_bytes_transferred"), float64(d.Usage.PromptTokens-1)*model.KVBytesPerToken(); sum != want {
		t.Errorf("decoder pulled %v bytes, want %v", sum, want)
	}
	waitFor(t, func() bool { return pe.Stats().UsedBlocks == 0 })
	// The room was claimed: a second decode leg naming it waits in vain.
	short := dcfg
	short.BootstrapTimeout = 20 * time.Millisecond
	_, ssrv := newTestEngine(t, short)
	resp := post(t, ssrv.URL+"/v1/chat/completions", chatBody(content, extra))
	if e := decode[errorResult](t, resp); resp.StatusCode != http.StatusBadRequest || e.Error.Param == nil || *e.Error.Param != "bootstrap_room" {
		t.Errorf("claimed room: %d %+v", resp.StatusCode, e)
	}
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}

// TestSGLangRoomRefused: a decode engine refuses, with 400 naming
// bootstrap_room and SGLang's KVTransferError, a room its prefill server
// never publishes and a prefill server it cannot reach.
func TestSGLangRoomRefused(t *testing.T) {
	_, psrv := newTestEngine(t, Config{Flavor: FlavorSGLang, Role: RolePrefill})
	_, dsrv := newTestEngine(t, Config{Flavor: FlavorSGLang, Role: RoleDecode, BootstrapTimeout: 20 * time.Millisecond})
	gone := httpURLOfClosedPort(t)
	for name, target := range map[string]string{"never prefilled": psrv.URL, "unreachable": gone} {
		t.Run(name, func(t *testing.T) {
			resp := post(t, dsrv.URL+"/v1/chat/completions", chatBody("hello", bootstrapExtra(t, target, 42)))
			e := decode[errorResult](t, resp)
			if resp.StatusCode != http.StatusBadRequest || e.Error.Param == nil || *e.Error.Param != "bootstrap_room" || !strings.HasPrefix(e.Error.Message, "KVTransferError(bootstrap_room=42)") {
				t.Errorf("%d %+v", resp.StatusCode, e.Error)
			}
		})
	}
	if m := scrape(t, psrv.URL); !strings.Contains(m, "sglang:") {
		t.Errorf("the prefill engine does not speak SGLang's metric names")
	}
}

func httpURLOfClosedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

// TestSGLangBootstrapFieldsChecked: malformed fields are refused with
// the field named; engines that are not SGLang P/D servers ignore them.
func TestSGLangBootstrapFieldsChecked(t *testing.T) {
	_, dsrv := newTestEngine(t, Config{Flavor: FlavorSGLang, Role: RoleDecode})
	for _, c := range []struct{ extra, param string }{
		{`,"bootstrap_host":"h","bootstrap_port":8998`, "bootstrap_room"},
		{`,"bootstrap_port":8998,"bootstrap_room":1`, "bootstrap_host"},
		{`,"bootstrap_host":"h","bootstrap_room":1`, "bootstrap_port"},
		{`,"bootstrap_host":["h"],"bootstrap_port":8998,"bootstrap_room":1`, "bootstrap_host"},
		{`,"bootstrap_host":"h","bootstrap_port":70000,"bootstrap_room":1`, "bootstrap_port"},
		{`,"bootstrap_host":"h","bootstrap_port":"8998","bootstrap_room":1`, "bootstrap_port"},
		{`,"bootstrap_host":"h","bootstrap_port":8998,"bootstrap_room":-1`, "bootstrap_room"},
		{`,"bootstrap_host":"h","bootstrap_port":8998,"bootstrap_room":9223372036854775808`, "bootstrap_room"},
		{`,"bootstrap_host":"h","bootstrap_port":8998,"bootstrap_room":1.5`, "bootstrap_room"},
		{`,"bootstrap_host":"h","bootstrap_port":8998,"bootstrap_room":1,"kv_transfer_params":{"do_remote_prefill":true}`, "kv_transfer_params"},
	} {
		resp := post(t, dsrv.URL+"/v1/chat/completions", chatBody("hello", c.extra))
		e := decode[errorResult](t, resp)
		if resp.StatusCode != http.StatusBadRequest || e.Error.Param == nil || *e.Error.Param != c.param {
			t.Errorf("%s: %d %+v, want 400 on %s", c.extra, resp.StatusCode, e.Error, c.param)
		}
	}
	for _, cfg := range []Config{{Flavor: FlavorSGLang}, {Flavor: FlavorVLLM, Role: RoleDecode}} {
		_, srv := newTestEngine(t, cfg)
		resp := post(t, srv.URL+"/v1/chat/completions", chatBody("hello", `,"bootstrap_host":"h","bootstrap_port":1,"bootstrap_room":"x"`))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s role %s: %d, want the fields ignored", cfg.Flavor, cfg.Role, resp.StatusCode)
		}
	}
}

// FuzzParseBootstrap: any bootstrap fields parse or are refused naming a
// field; parsed ones are in range and survive a round trip.
func FuzzParseBootstrap(f *testing.F) {
	f.Add([]byte(`"10.0.0.1"`), []byte(`8998`), []byte(`9223372036854775807`))
	f.Add([]byte(`null`), []byte(``), []byte(`1`))
	f.Add([]byte(`["a"]`), []byte(`"1"`), []byte(`-0`))
	f.Fuzz(func(t *testing.T, host, port, room []byte) {
		b, err := ParseBootstrap(BootstrapFields{BootstrapHost: host, BootstrapPort: port, BootstrapRoom: room})
		if err != nil {
			pe, ok := err.(*paramError)
			if !ok || !strings.HasPrefix(pe.param, "bootstrap_") {
				t.Fatalf("error %v names no bootstrap field", err)
			}
			return
		}
		if b == nil {
			return
		}
		if b.Host == "" || b.Port < 1 || b.Port > 65535 || b.Room > math.MaxInt64 {
			t.Fatalf("out of range: %+v", b)
		}
		h, _ := json.Marshal(b.Host)
		again, err := ParseBootstrap(BootstrapFields{BootstrapHost: h, BootstrapPort: []byte(strconv.Itoa(b.Port)), BootstrapRoom: []byte(strconv.FormatUint(b.Room, 10))})
		if err != nil || *again != *b {
			t.Fatalf("round trip %+v: %+v, %v", b, again, err)
		}
	})
}
