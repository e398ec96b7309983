package kv

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/cockroachdb/datadriven"
)

// blockNames gives test blocks readable names: a block named "a" has the
// hash xxhash("a").
type blockNames map[BlockHash]string

func (n blockNames) parse(s string) []BlockHash {
	var hs []BlockHash
	for _, name := range strings.Split(s, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		h := BlockHash(xxhash.Sum64String(name))
		n[h] = name
		hs = append(hs, h)
	}
	return hs
}

func (n blockNames) name(h BlockHash) string {
	if s, ok := n[h]; ok {
		return s
	}
	return fmt.Sprintf("%016x", uint64(h))
}

func TestIndexDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata/index", func(t *testing.T, path string) {
		names := blockNames{}
		x := NewIndex(IndexOptions{})
		weights := DefaultTierWeights
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			arg := func(key string) string {
				for _, a := range d.CmdArgs {
					if a.Key == key && len(a.Vals) > 0 {
						return strings.Join(a.Vals, ",")
					}
				}
				return ""
			}
			intArg := func(key string, def int) int {
				s := arg(key)
				if s == "" {
					return def
				}
				v, err := strconv.Atoi(s)
				if err != nil {
					d.Fatalf(t, "%s: %v", key, err)
				}
				return v
			}
			tierArg := func() Tier {
				tier, err := ParseTier(arg("tier"))
				if err != nil {
					d.Fatalf(t, "%v", err)
				}
				return tier
			}
			ep := intArg("ep", 0)

			switch d.Cmd {
			case "new":
				x = NewIndex(IndexOptions{DefaultCapacity: intArg("capacity", 0)})
				return ""
			case "capacity":
				if arg("tier") != "" {
					x.SetTierCapacity(ep, tierArg(), intArg("blocks", 0))
				} else {
					x.SetCapacity(ep, intArg("blocks", 0))
				}
				return ""
			case "group":
				x.SetGroup(ep, intArg("group", -1))
				return ""
			case "savings":
				// Weights from per-block times, e.g. recompute=100us cpu=5us.
				dur := func(key string) time.Duration {
					if arg(key) == "" {
						return 0
					}
					v, err := time.ParseDuration(arg(key))
					if err != nil {
						d.Fatalf(t, "%s: %v", key, err)
					}
					return v
				}
				var load [NumTiers]time.Duration
				for tier := range Tier(NumTiers) {
					load[tier] = dur(tier.String())
				}
				weights = SavingsWeights(dur("recompute"), load)
				var b strings.Builder
				for tier, w := range weights {
					fmt.Fprintf(&b, "%s=%.2f ", Tier(tier), w)
				}
				return strings.TrimSpace(b.String()) + "\n"
			case "record":
				x.Record(ep, tierArg(), names.parse(arg("blocks")))
				return ""
			case "remove":
				x.Remove(ep, tierArg(), names.parse(arg("blocks")))
				return ""
			case "clear":
				x.Clear(ep)
				return ""
			case "stale":
				if s := arg("set"); s != "" {
					x.SetStale(ep, s == "true")
				}
				return strconv.FormatBool(x.Stale(ep))
			case "match":
				out := make([]Match, intArg("endpoints", 4))
				best := x.MatchPrefix(names.parse(arg("blocks")), out)
				var b strings.Builder
				for i, m := range out {
					if m.Blocks == 0 && !m.Stale {
						continue
					}
					fmt.Fprintf(&b, "ep=%d blocks=%d", i, m.Blocks)
					for tier, n := range m.ByTier {
						if n > 0 {
							fmt.Fprintf(&b, " %s=%d", Tier(tier), n)
						}
					}
					if m.Stale {
						b.WriteString(" stale")
					}
					fmt.Fprintf(&b, " weighted=%.1f\n", m.Weighted(&weights))
				}
				fmt.Fprintf(&b, "best=%d\n", best)
				return b.String()
			case "lru":
				// Most recent first.
				x.mu.RLock()
				defer x.mu.RUnlock()
				var got []string
				if ep < len(x.mu.endpoints) && x.mu.endpoints[ep] != nil {
					l := &x.mu.endpoints[ep].tiers[tierArg()]
					for n := l.list.Front(); n != 0; n = l.list.Next(n) {
						got = append(got, names.name(l.list.Value(n).hash))
					}
				}
				return strings.Join(got, " ") + "\n"
			case "dump":
				x.mu.RLock()
				defer x.mu.RUnlock()
				var lines []string
				for h, holders := range x.mu.blocks {
					line := names.name(h) + ":"
					hs := slices.Clone(holders)
					slices.SortFunc(hs, func(a, b holder) int { return int(a.endpoint - b.endpoint) })
					for _, hd := range hs {
						var tiers []string
						for tier, n := range hd.node {
							if n != 0 {
								tiers = append(tiers, Tier(tier).String())
							}
						}
						line += fmt.Sprintf(" ep%d=%s", hd.endpoint, strings.Join(tiers, "+"))
					}
					lines = append(lines, line)
				}
				slices.Sort(lines)
				lines = append(lines, fmt.Sprintf("len=%d", len(x.mu.blocks)))
				return strings.Join(lines, "\n") + "\n"
			case "stats":
				if d.HasArg("ep") {
					s := x.EndpointStats(ep)
					var b strings.Builder
					for tier := range NumTiers {
						fmt.Fprintf(&b, "%s=%d/%d ", Tier(tier), s.Blocks[tier], s.Capacity[tier])
					}
					fmt.Fprintf(&b, "evictions=%d stale=%t\n", s.Evictions, s.Stale)
					return b.String()
				}
				s := x.Stats()
				return fmt.Sprintf("blocks=%d lookups=%d lookup-blocks=%d matched=%d\n",
					s.Blocks, s.Lookups, s.LookupBlocks, s.MatchedBlocks)
			default:
				d.Fatalf(t, "unknown command %q", d.Cmd)
				return ""
			}
		})
	})
}

func TestTier(t *testing.T) {
	for tier := range Tier(NumTiers) {
		got, err := ParseTier(strings.ToUpper(tier.String()))
		if err != nil || got != tier {
			t.Errorf("ParseTier(%q) = %v, %v", tier, got, err)
		}
	}
	if _, err := ParseTier("tape"); err == nil {
		t.Error("ParseTier(tape) succeeded")
	}
	if got := Tier(9).String(); got != "tier(9)" {
		t.Errorf("Tier(9) = %q", got)
	}
}

func TestIndexEndpointOutOfRange(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("negative endpoint id did not panic")
		}
	}()
	NewIndex(IndexOptions{}).Record(-1, HBM, []BlockHash{1})
}
