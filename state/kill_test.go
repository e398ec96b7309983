//go:build unix

package state_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"

	"github.com/turnpike-gateway/turnpike/state"
)

// TestSyncedSurvivesKill: a synced write is durable when it returns. A
// child process writes and kills itself with SIGKILL, closing nothing;
// the parent opens the directory and finds every synced write.
func TestSyncedSurvivesKill(t *testing.T) {
	if dir := os.Getenv("TURNPIKE_STATE_KILL_DIR"); dir != "" {
		writeAndDie(dir)
		return
	}
	if testing.Short() {
		t.Skip("runs a child process")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSyncedSurvivesKill$")
	cmd.Env = append(os.Environ(), "TURNPIKE_STATE_KILL_DIR="+dir)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child: %v, want killed\n%s", err, out)
	}
	db := openPebble(t, dir)
	want := []string{"batch/1=b", "batch/2=b", "put=p"}
	if got := scan(t, db.Namespace("rs/"), state.Range{}); !slices.Equal(got, want) {
		t.Errorf("after kill -9: %v, want %v", got, want)
	}
}

func writeAndDie(dir string) {
	db, err := state.OpenPebble(dir, state.PebbleOptions{})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	ns := db.Namespace("rs/")
	if err := ns.Put(ctx, []byte("put"), []byte("p")); err != nil {
		panic(err)
	}
	b := state.Batch{Sync: true}
	b.Put([]byte("batch/1"), []byte("b"))
	b.Put([]byte("batch/2"), []byte("b"))
	if err := ns.Apply(ctx, &b); err != nil {
		panic(err)
	}
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}
