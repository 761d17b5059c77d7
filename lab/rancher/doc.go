// Package rancher is the lab's Rancher: an emulator of the part of
// Rancher's v3 API (the norman API under /v3) that registers an imported
// cluster and manages its members, for the rancher plugin's tests.
//
// Server is an http.Handler to serve with httptest (TLS). It keeps
// clusters, cluster registration tokens, cluster role template bindings
// and principals in memory, answers in Rancher's JSON shapes (collections
// {"type":"collection","data":[...]}, errors {"type":"error",...}),
// serves the import manifest the registration command names, and has a
// small control API for tests: principals to find, clusters and bindings
// made outside the plugin, faults per method and path, and the log of the
// requests it answered.
//
// What it copies from Rancher, and where that was read, is in the notes
// on the lab's fidelity (the Rancher section). It does not import the
// project's production code.
package rancher
