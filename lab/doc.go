// Package lab wires the simulated datacenter the demo, the end-to-end tests
// and the benchmarks run against: emulators that speak the real wire
// protocols (Proxmox VE API, OpenStack APIs, Talos API, Kubernetes API,
// Image Factory), so
// the production clients talk to them unchanged. Everything listens on
// loopback addresses (127.0.0.0/8) only.
package lab
