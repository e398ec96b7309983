package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestKill9KeepsResponses runs the real binary, creates a response,
// kills the process with SIGKILL and checks that a restarted gateway on
// the same data directory still serves the response: acknowledged means
// durable.
func TestKill9KeepsResponses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "turnpike")
	build := exec.Command("go", "build", "-o", bin, "./cmd/turnpike")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building cmd/turnpike: %v\n%s", err, out)
	}
	data := filepath.Join(dir, "data")
	addr := freeAddr(t)

	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "serve", "--addr", addr, "--data-dir", data)
		cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		deadline := time.Now().Add(20 * time.Second)
		for {
			resp, err := http.Get("http://" + addr + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return cmd
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("turnpike did not become ready on %s", addr)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	cmd := start()
	model := firstModel(t, addr)
	body := fmt.Sprintf(`{"model":%q,"input":"remember me","max_output_tokens":4}`, model)
	resp, err := http.Post("http://"+addr+"/v1/responses", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound && !strings.Contains(string(raw), "resp_") {
		t.Fatalf("cmd/turnpike does not serve the Responses API: %s", raw)
	}
	var created struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &created) != nil || created.ID == "" {
		t.Fatalf("create: %d %s", resp.StatusCode, raw)
	}

	cmd.Process.Kill() // SIGKILL: no shutdown, no flush
	cmd.Wait()
	start()

	got, err := http.Get("http://" + addr + "/v1/responses/" + created.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Body.Close()
	raw, _ = io.ReadAll(got.Body)
	var after struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	if got.StatusCode != http.StatusOK || json.Unmarshal(raw, &after) != nil || after.ID != created.ID || after.Status != created.Status {
		t.Fatalf("after kill -9: %d %s, want %s %s", got.StatusCode, raw, created.ID, created.Status)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func firstModel(t *testing.T, addr string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v1/models", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var models struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if json.NewDecoder(resp.Body).Decode(&models); len(models.Data) == 0 {
		t.Fatal("the gateway serves no model")
	}
	return models.Data[0].ID
}
