// Package accelerators describes the hardware turnpike schedules onto: a
// catalog of accelerator profiles and open-model profiles, and the roofline
// arithmetic that turns them into KV capacity and step times. Its
// subpackage sim is a simulated engine built on that arithmetic.
package accelerators
