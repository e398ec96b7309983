// Package filewatch tells its owner when a file may have changed, however
// it was replaced: the file's directory is watched, not the file, so that
// a write in place, a rename over the file and the swap of a symlink on
// its path (as a Kubernetes ConfigMap volume updates, through its ..data
// link) are all seen; and the owner is told again every resync interval,
// for the file systems on which a watch misses a change.
//
// A Watcher only says "look again": its owner reads the file and decides
// whether anything changed. The endpoints files of discovery and the
// gateway's config file are both watched this way.
//
// # Concurrency model
//
// New watches; Run calls the owner's function from one goroutine of its
// own until Close, which stops it and waits for it.
package filewatch
