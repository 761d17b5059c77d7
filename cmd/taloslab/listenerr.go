package main

import "fmt"

// listenError is an address the running lab needed and could not listen
// on: a node's Talos API or a cluster's Kubernetes API at its VIP.
type listenError struct {
	addr string // host:port
	what string
	err  string
}

func (e *listenError) Error() string {
	return fmt.Sprintf("the lab cannot listen on %s, %s: %s; another program uses the lab's network (choose another with --subnet)",
		e.addr, e.what, e.err)
}
