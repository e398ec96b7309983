// Package redistest starts a real redis-server for tests: on a private
// loopback port, with its files in a temporary directory, the AOF on and
// fsynced before every reply (appendfsync always, the setting turnpike's
// docs recommend), no RDB snapshots. A test that calls Start on a machine
// without redis-server is skipped, with a message saying how to install it.
//
// A Server is owned by the test that started it and stopped at its
// cleanup (Launch and Stop are the same outside a test, for turnpike
// bench); Kill and Restart are for tests of what survives a crash.
package redistest
