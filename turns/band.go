package turns

import (
	"fmt"
	"strings"
)

// Band is a priority class. Bands are served in strict order, Interactive
// first, with a small guaranteed share for the lower ones (see
// BandConfig.MinShare). A smaller value is more urgent; the zero Band is
// unset and means "the tenant's default".
type Band uint8

// The bands, most urgent first.
const (
	// Interactive is a person waiting on the answer: chat, an IDE turn.
	Interactive Band = iota + 1
	// Standard is the default for agents.
	Standard
	// Background is work nobody is watching: batch, evals, Responses
	// background mode, the flex service tier.
	Background
)

// numBands sizes per-band arrays, indexed by Band.index.
const numBands = 3

// Bands lists the bands, most urgent first.
var Bands = [numBands]Band{Interactive, Standard, Background}

var bandNames = [numBands]string{"interactive", "standard", "background"}

// index maps a valid band to 0..numBands-1.
func (b Band) index() int { return int(b) - 1 }

// Valid reports whether b is one of the three bands (not unset).
func (b Band) Valid() bool { return b >= Interactive && b <= Background }

// Priority is the band as an engine's request priority, lower first:
// Interactive 0, Standard 1, Background 2.
func (b Band) Priority() int { return b.index() }

// String is the band's name as headers, config and metrics spell it.
func (b Band) String() string {
	if b.Valid() {
		return bandNames[b.index()]
	}
	if b == 0 {
		return "unset"
	}
	return fmt.Sprintf("Band(%d)", uint8(b))
}

// ParseBand parses a band name, ignoring case and surrounding space.
func ParseBand(s string) (Band, error) {
	s = strings.TrimSpace(s)
	for i, name := range bandNames {
		if strings.EqualFold(s, name) {
			return Bands[i], nil
		}
	}
	return 0, fmt.Errorf("turns: unknown band %q (want interactive, standard or background)", s)
}

// MarshalText writes the band's name; the zero band is the empty string.
func (b Band) MarshalText() ([]byte, error) {
	if b == 0 {
		return nil, nil
	}
	if !b.Valid() {
		return nil, fmt.Errorf("turns: invalid band %d", uint8(b))
	}
	return []byte(b.String()), nil
}

// UnmarshalText parses a band name; the empty string is the zero band.
func (b *Band) UnmarshalText(text []byte) error {
	if len(text) == 0 {
		*b = 0
		return nil
	}
	v, err := ParseBand(string(text))
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// capAt returns b, lowered to max when b is more urgent than max allows.
func (b Band) capAt(max Band) Band {
	if b < max {
		return max
	}
	return b
}

// Responses API service tiers that move a turn between bands.
const (
	ServiceTierPriority = "priority"
	ServiceTierFlex     = "flex"
)

// Hints are what a request says of its own urgency, raw as it arrived;
// Classify weighs them against the tenant's bands.
type Hints struct {
	// Priority is the x-turnpike-priority header value, "" if absent.
	// An unknown value is ignored.
	Priority string
	// ServiceTier is the request body's service_tier: "priority" means
	// Interactive, "flex" means Background, "default", "auto" and "" leave
	// the band as it is.
	ServiceTier string
	// Background is the Responses body's background flag.
	Background bool
}

// Classify picks a turn's band. Each rule overrides the ones before it:
// the tenant's default band, then the x-turnpike-priority header, then the
// service tier, then background: true (always Background); last, the result
// is capped at the tenant's maximum band, so no hint lifts a tenant above
// what it is allowed. A zero DefaultBand means Standard, a zero MaxBand no
// cap.
func Classify(tenant Tenant, h Hints) Band {
	b := tenant.DefaultBand
	if !b.Valid() {
		b = Standard
	}
	if h.Priority != "" {
		if p, err := ParseBand(h.Priority); err == nil {
			b = p
		}
	}
	switch strings.ToLower(h.ServiceTier) {
	case ServiceTierPriority:
		b = Interactive
	case ServiceTierFlex:
		b = Background
	}
	if h.Background {
		b = Background
	}
	max := tenant.MaxBand
	if !max.Valid() {
		max = Interactive
	}
	return b.capAt(max)
}
