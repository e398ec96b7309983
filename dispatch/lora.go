package dispatch

import "github.com/turnpike-gateway/turnpike/turns"

// capacityOf is flow control's view of model: its own, or, for a LoRA
// adapter, its base model's, whose replicas serve it (the adapters an
// engine lists come and go while the gateway runs); nil when the fleet
// serves neither.
func (d *Dispatcher) capacityOf(model string) *turns.ModelCapacity {
	if c := d.capacity[model]; c != nil {
		return c
	}
	if base := d.reg.AdapterBase(model); base != "" {
		return d.capacity[base]
	}
	return nil
}
