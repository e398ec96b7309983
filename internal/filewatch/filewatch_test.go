package filewatch

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestSymlinkSwap: the swap of a symlink on the file's path, as a
// ConfigMap volume updates, is seen as a change of the directory.
func TestSymlinkSwap(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"v1", "v2"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, d, "f.yaml"), []byte(d), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "f.yaml")
	if err := os.Symlink(filepath.Join("..data", "f.yaml"), path); err != nil {
		t.Fatal(err)
	}
	w, err := New(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(t.Context())
	seen := make(chan string, 64)
	// A resync far beyond the test: only the watch can tell.
	w.Run(time.Hour, func(event string, err error) {
		if err != nil {
			t.Errorf("watch error: %v", err)
		}
		b, _ := os.ReadFile(path)
		seen <- string(b)
	})
	if err := os.Symlink("v2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for got := range seen {
		if got == "v2" {
			return
		}
	}
}
