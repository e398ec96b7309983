package agents

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// The profiler label the bench's own goroutines carry.
const (
	labelKey    = "turnpike-bench"
	labelClient = "client"
)

// asClient runs fn with the bench's profiler label: every goroutine it
// starts inherits it, and so do the connections they dial.
func asClient(ctx context.Context, fn func(context.Context)) {
	pprof.Do(ctx, pprof.Labels(labelKey, labelClient), fn)
}

// CPUSplit is a stretch's CPU time by who spent it, in seconds.
type CPUSplit struct {
	// Gateway is every sample that is neither the bench's nor in the
	// simulator's code, background GC excluded; Client the bench's
	// goroutines; Engines the simulator's code run in this process; GC
	// the runtime's background mark workers, the whole process's.
	Gateway float64 `json:"gateway_seconds"`
	Client  float64 `json:"client_seconds"`
	Engines float64 `json:"engines_seconds"`
	GC      float64 `json:"gc_seconds"`
}

// GatewayWithGC is Gateway plus its share of the background GC, in
// proportion to the other CPU it spent.
func (s CPUSplit) GatewayWithGC() float64 {
	rest := s.Gateway + s.Client + s.Engines
	if rest == 0 {
		return 0
	}
	return s.Gateway + s.GC*s.Gateway/rest
}

// cpuProfile profiles the process, one stretch at a time.
type cpuProfile struct {
	buf bytes.Buffer
	on  bool
	// err is why the profile could not run (another one is running).
	err error
	// save, if set, keeps each stretch's CPU profile (kind "cpu") and
	// the heap's at its end ("heap").
	save func(stretch int, kind string, profile []byte) error
}

// profileSaver keeps stretch k's CPU profile as dir/phase-K-LABEL.pprof
// and the heap's at its end as dir/phase-K-LABEL.heap.pprof; nil where
// dir is empty.
func profileSaver(dir, label string) func(int, string, []byte) error {
	if dir == "" {
		return nil
	}
	return func(k int, kind string, profile []byte) error {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		ext := ".pprof"
		if kind != "cpu" {
			ext = "." + kind + ext
		}
		name := fmt.Sprintf("phase-%d-%s%s", k+1, strings.NewReplacer("/", "-", " ", "-").Replace(label), ext)
		return os.WriteFile(filepath.Join(dir, name), profile, 0o644)
	}
}

func startCPUProfile() *cpuProfile {
	p := &cpuProfile{}
	if err := pprof.StartCPUProfile(&p.buf); err != nil {
		p.err = err
		return p
	}
	p.on = true
	return p
}

// cut ends stretch k, profiled so far, splits it, and starts the next
// one unless last.
func (p *cpuProfile) cut(k int, last bool) (CPUSplit, error) {
	if !p.on {
		return CPUSplit{}, p.err
	}
	pprof.StopCPUProfile()
	split, err := splitProfile(p.buf.Bytes())
	if p.save != nil {
		err = errors.Join(err, p.save(k, "cpu", p.buf.Bytes()))
		// The heap as the last collection left it: what is live, by
		// where it was allocated.
		var heap bytes.Buffer
		if herr := pprof.Lookup("heap").WriteTo(&heap, 0); herr == nil {
			err = errors.Join(err, p.save(k, "heap", heap.Bytes()))
		} else {
			err = errors.Join(err, herr)
		}
	}
	p.buf.Reset()
	p.on = false
	if !last {
		if err := pprof.StartCPUProfile(&p.buf); err != nil {
			p.err = err
		} else {
			p.on = true
		}
	}
	return split, err
}

// simPackage is the simulator's import path: samples with a frame in it
// are the engines'.
const simPackage = "github.com/turnpike-gateway/turnpike/accelerators/sim."

// splitProfile reads a CPU profile (gzipped profile.proto) and splits its
// samples' CPU time.
func splitProfile(gz []byte) (CPUSplit, error) {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return CPUSplit{}, err
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		return CPUSplit{}, err
	}
	p, err := parseProfile(raw)
	if err != nil {
		return CPUSplit{}, err
	}
	// The CPU nanoseconds are the value typed "cpu"; Go writes them
	// second, after the sample count.
	vi := 1
	for i, t := range p.sampleTypes {
		if p.str(t) == "cpu" {
			vi = i
		}
	}
	var split CPUSplit
	for _, s := range p.samples {
		if vi >= len(s.values) {
			continue
		}
		sec := float64(s.values[vi]) / 1e9
		switch {
		case p.labelled(s, labelKey, labelClient):
			split.Client += sec
		case p.inFunction(s, func(name string) bool { return strings.HasPrefix(name, simPackage) }):
			split.Engines += sec
		case p.inFunction(s, func(name string) bool { return name == "runtime.gcBgMarkWorker" }):
			split.GC += sec
		default:
			split.Gateway += sec
		}
	}
	return split, nil
}

// profile is what splitProfile needs of a profile.proto.
type profile struct {
	sampleTypes []int64 // string indexes of each value's type
	samples     []sample
	locations   map[uint64][]uint64 // location id: function ids, inlined first
	functions   map[uint64]int64    // function id: name's string index
	strings     []string
}

type sample struct {
	locations []uint64
	values    []int64
	labels    [][2]int64 // key and value string indexes
}

func (p *profile) str(i int64) string {
	if i < 0 || int(i) >= len(p.strings) {
		return ""
	}
	return p.strings[i]
}

func (p *profile) labelled(s sample, key, value string) bool {
	for _, l := range s.labels {
		if p.str(l[0]) == key && p.str(l[1]) == value {
			return true
		}
	}
	return false
}

func (p *profile) inFunction(s sample, match func(string) bool) bool {
	for _, loc := range s.locations {
		for _, fn := range p.locations[loc] {
			if match(p.str(p.functions[fn])) {
				return true
			}
		}
	}
	return false
}

var errProfile = errors.New("agents: malformed CPU profile")

// parseProfile decodes the fields of profile.proto that splitProfile
// reads: sample_type (1), sample (2), location (4), function (5) and
// string_table (6).
func parseProfile(b []byte) (*profile, error) {
	p := &profile{locations: map[uint64][]uint64{}, functions: map[uint64]int64{}}
	err := fields(b, func(num protowire.Number, typ protowire.Type, v uint64, msg []byte) error {
		switch num {
		case 1:
			return fields(msg, func(n protowire.Number, _ protowire.Type, v uint64, _ []byte) error {
				if n == 1 {
					p.sampleTypes = append(p.sampleTypes, int64(v))
				}
				return nil
			})
		case 2:
			var s sample
			err := fields(msg, func(n protowire.Number, t protowire.Type, v uint64, m []byte) error {
				switch n {
				case 1:
					return varints(t, v, m, func(x uint64) { s.locations = append(s.locations, x) })
				case 2:
					return varints(t, v, m, func(x uint64) { s.values = append(s.values, int64(x)) })
				case 3:
					var l [2]int64
					err := fields(m, func(n protowire.Number, _ protowire.Type, v uint64, _ []byte) error {
						if n == 1 || n == 2 {
							l[n-1] = int64(v)
						}
						return nil
					})
					s.labels = append(s.labels, l)
					return err
				}
				return nil
			})
			p.samples = append(p.samples, s)
			return err
		case 4:
			var id uint64
			var fns []uint64
			err := fields(msg, func(n protowire.Number, _ protowire.Type, v uint64, m []byte) error {
				switch n {
				case 1:
					id = v
				case 4:
					return fields(m, func(n protowire.Number, _ protowire.Type, v uint64, _ []byte) error {
						if n == 1 {
							fns = append(fns, v)
						}
						return nil
					})
				}
				return nil
			})
			p.locations[id] = fns
			return err
		case 5:
			var id uint64
			var name int64
			err := fields(msg, func(n protowire.Number, _ protowire.Type, v uint64, _ []byte) error {
				switch n {
				case 1:
					id = v
				case 2:
					name = int64(v)
				}
				return nil
			})
			p.functions[id] = name
			return err
		case 6:
			if typ != protowire.BytesType {
				return errProfile
			}
			p.strings = append(p.strings, string(msg))
		}
		return nil
	})
	return p, err
}

// fields calls fn for each field of the message b: its number and type,
// its value if a varint, its bytes if length-delimited.
func fields(b []byte, fn func(num protowire.Number, typ protowire.Type, v uint64, msg []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errProfile
		}
		b = b[n:]
		var v uint64
		var msg []byte
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			msg, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return errProfile
		}
		b = b[n:]
		if err := fn(num, typ, v, msg); err != nil {
			return err
		}
	}
	return nil
}

// varints reads a repeated varint field, packed (bytes) or not (one
// varint).
func varints(typ protowire.Type, v uint64, packed []byte, add func(uint64)) error {
	if typ == protowire.VarintType {
		add(v)
		return nil
	}
	for len(packed) > 0 {
		x, n := protowire.ConsumeVarint(packed)
		if n < 0 {
			return errProfile
		}
		add(x)
		packed = packed[n:]
	}
	return nil
}

// processCPU is the process's user and system CPU so far, in seconds,
// from /proc/self/stat; 0 where there is none.
func processCPU() float64 {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0
	}
	// The fields after the command's closing parenthesis: state is
	// field 3, utime 14 and stime 15, in clock ticks (100 a second on
	// Linux).
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	s, _ := strconv.ParseFloat(f[12], 64)
	return (u + s) / 100
}

// processRSS is the process's resident set, in bytes, from
// /proc/self/status; 0 where there is none.
func processRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
